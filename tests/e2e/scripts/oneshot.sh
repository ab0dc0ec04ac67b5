# Custom kit scenario (run-scenario.sh custom --script this): one
# `hermes -z` run, the one-shot mode scripts and system cron jobs use, with
# a tool call. Sourced by the kit.
step oneshot "$HERMES" -z "READFILE please read hello.txt"
