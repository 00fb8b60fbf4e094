//! The operator's loopback listener for helm (`tinycode_operator::helm::api_proxy`)
//! on its own, for `hack/helm-cost.sh` (config `api-proxy`): it reaches the
//! cluster of KUBECONFIG, writes the kubeconfig helm uses to reach it into
//! the file named by the first argument, and serves until killed, so its CPU
//! can be read from /proc apart from helm's. With a chart directory as the
//! second argument, `/apis` lists only the groups its templates name, as in
//! the operator.
//!
//! Usage: cargo run --release --example helm_api_proxy -- KUBECONFIG_OUT [CHART]

use std::os::unix::fs::OpenOptionsExt;

#[tokio::main]
async fn main() {
    let out = std::env::args().nth(1).expect("usage: helm_api_proxy KUBECONFIG_OUT");
    let client = kube::Client::try_default().await.expect("a client for KUBECONFIG");
    let groups = std::env::args().nth(2).map(|chart| {
        tinycode_operator::helm::api_proxy::chart_api_groups(std::path::Path::new(&chart))
            .expect("the chart's templates")
    });
    let proxy = tinycode_operator::helm::api_proxy::ApiProxy::start(client, groups).await.expect("listen on loopback");
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&out).expect("a new file");
    std::io::Write::write_all(&mut file, proxy.kubeconfig().as_bytes()).expect("write the kubeconfig");
    drop(file);
    eprintln!("helm_api_proxy: listening on {}", proxy.addr());
    std::future::pending::<()>().await;
}
