# Custom kit scenario (run-scenario.sh custom --script this, with the
# pipeline sidecar): the shipped alert rules on real runs. A cheap chat;
# then Prometheus is given a quiet day of history of the cost series it now
# holds (pipeline_control.py prometheus.backfill: HermesCostSpike compares
# the last hour with the last 24). Prices go up 1000-fold and a global
# daily budget of 1 USD is set: the second chat crosses the budget with its
# first call, and is stopped before the provider after it
# (HermesBudgetHardBurn), and spends more than 1 USD in the hour, more than
# 3x the day's hourly average (HermesCostSpike). Sourced by the kit.
chat cheap "plain question please"
step history "$PY" "$SCRIPT_DIR/pipeline_control.py" --out "$OUTDIR" prometheus.backfill
cat > "$HERMES_METER_HOME/pricing.toml" <<'PRICES'
[models."mock-model"]
input = 2000.0
output = 8000.0
cache_read = 500.0
cache_write = 2500.0
PRICES
step budget "$(dirname "$HERMES")/hermes-meter" budget set global daily 1
chat dear "READFILE please read hello.txt"
