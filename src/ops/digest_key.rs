//! The operator's key for digests written where tenants can read them (the
//! `checksum/secrets` annotation of instance pods). A plain SHA-256 of a
//! Secret's content there would let anyone who may read pods test guessed
//! passwords offline; an HMAC keyed with this still changes when a Secret
//! does (so pods roll) and tells a reader nothing. The key lives in Secret
//! `tinycode-operator-digest-key` of the operator's namespace, made on the
//! first start, read by every replica and every later start (so pods do not
//! roll on a restart), and never logged.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::PostParams;
use kube::{Api, Client};

pub const SECRET_NAME: &str = "tinycode-operator-digest-key";
const KEY: &str = "key";
/// Bytes of a new key.
const KEY_LEN: usize = 32;

/// The key, from its Secret, made first when there is none.
pub async fn load_or_create(client: &Client, namespace: &str) -> Result<Vec<u8>, String> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    for _ in 0..3 {
        let found = secrets
            .get_opt(SECRET_NAME)
            .await
            .map_err(|e| format!("cannot read Secret {namespace}/{SECRET_NAME}: {e}"))?;
        if let Some(secret) = found {
            return key_of(&secret).ok_or_else(|| {
                format!("Secret {namespace}/{SECRET_NAME} has no key {KEY:?} of {KEY_LEN} bytes or more; delete it to make a new one")
            });
        }
        let mut key = vec![0u8; KEY_LEN];
        getrandom::fill(&mut key).map_err(|e| format!("the OS random source failed: {e}"))?;
        let secret = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(SECRET_NAME.into()),
                labels: Some([("app.kubernetes.io/name".to_string(), "tinycode-operator".to_string())].into()),
                ..Default::default()
            },
            data: Some([(KEY.to_string(), ByteString(key.clone()))].into()),
            ..Default::default()
        };
        match secrets.create(&PostParams::default(), &secret).await {
            Ok(_) => return Ok(key),
            // Another replica made it first: read theirs.
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(format!("cannot create Secret {namespace}/{SECRET_NAME}: {e}")),
        }
    }
    Err(format!("Secret {namespace}/{SECRET_NAME} keeps appearing and vanishing"))
}

fn key_of(secret: &Secret) -> Option<Vec<u8>> {
    let key = secret.data.as_ref()?.get(KEY)?.0.clone();
    (key.len() >= KEY_LEN).then_some(key)
}

#[cfg(test)]
mod tests {
    use crate::render::values::keyed_hex;

    #[test]
    fn a_keyed_digest_cannot_be_recomputed_without_the_key() {
        let content = b"pw-secret\0TINYCODE_SERVER_PASSWORD\0hunter2";
        let with_key = keyed_hex(b"k1-32-bytes-of-operator-key-....", content);
        assert_ne!(with_key, keyed_hex(b"k2-32-bytes-of-operator-key-....", content));
        assert_ne!(with_key, crate::render::values::sha256_hex(content), "not the plain digest a viewer can compute");
        assert_eq!(
            with_key,
            keyed_hex(b"k1-32-bytes-of-operator-key-....", content),
            "stable: pods roll only on change"
        );
        assert_ne!(
            with_key,
            keyed_hex(b"k1-32-bytes-of-operator-key-....", b"pw-secret\0TINYCODE_SERVER_PASSWORD\0hunter3")
        );
    }
}
