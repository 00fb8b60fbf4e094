//! The `tinycode-operator` binary; see [`tinycode_operator::cli`].
use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = tinycode_operator::cli::Cli::parse();
    tinycode_operator::cli::main(cli)
}
