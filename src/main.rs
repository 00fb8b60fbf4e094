use kube::CustomResourceExt;
fn main() {
    print!("{}", serde_yaml::to_string(&tinycode_operator::api::TinycodeInstance::crd()).unwrap());
}
