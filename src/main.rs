//! The `hermes-otel` binary: the CLI in [`hermes_otel::cli`].

fn main() {
    std::process::exit(hermes_otel::cli::run(std::env::args_os()));
}
