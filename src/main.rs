//! The `tinycode-operator` binary; see [`tinycode_operator::cli`].
use clap::Parser;

#[cfg(feature = "heap-profile")]
#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

fn main() -> std::process::ExitCode {
    #[cfg(feature = "heap-profile")]
    let _profiler = dhat::Profiler::new_heap();
    // The model-key proxy holds keys its neighbour must not read: not
    // dumpable from its first instruction on (src/modelkeys).
    if std::env::args_os().nth(1).is_some_and(|a| a == "model-keys") {
        let _ = nix::sys::prctl::set_dumpable(false);
    }
    // kube and reqwest share rustls; pick its crypto provider once, first.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = tinycode_operator::cli::Cli::parse();
    tinycode_operator::cli::main(cli)
}
