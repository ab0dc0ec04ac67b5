# Custom kit scenario (run-scenario.sh custom --script this): one `chat -q`
# whose session title the model answers 3 s after the turn's answer (the
# mock's SLOWTITLE), so Hermes's title call is still in flight when the run
# exits: the exit must wait for it, or its tokens and cost leave with the
# next process instead of this run. Sourced by the kit.
chat slow_title "SLOWTITLE say hello"
