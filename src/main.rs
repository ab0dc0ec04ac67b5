//! The `hermes-meter` binary: the CLI in [`hermes_meter::cli`].

fn main() {
    // The binary owns its process: lift the historical 1,024-descriptor
    // soft limit so `ui` and `serve --prometheus` can hold their full
    // connection cap. (The extension, inside Hermes, does not.)
    hermes_meter_runtime::http_server::raise_open_file_limit();
    std::process::exit(hermes_meter::cli::run(std::env::args_os()));
}
