//! Small helpers around the API calls every writing stage makes. A leaf.

use kube::api::{DeleteParams, PatchParams};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

use crate::FIELD_MANAGER;

/// Server-side apply with the operator's one field manager, taking fields over.
pub fn apply_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

/// Deletes an object; a missing one is fine.
pub async fn delete_ignoring_missing<K>(api: &Api<K>, name: &str) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}
