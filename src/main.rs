//! The `tinycode-operator` binary; see [`tinycode_operator::cli`].
use clap::Parser;

fn main() -> std::process::ExitCode {
    // kube and reqwest share rustls; pick its crypto provider once, first.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = tinycode_operator::cli::Cli::parse();
    tinycode_operator::cli::main(cli)
}
