//! What the last release rendered (pure): a Helm release record decoded
//! (base64, then gzip, of the release JSON) down to the objects of its
//! manifest. Drift is judged against this list, so a new template is watched
//! over without a list kept by hand. Records are read from the operator's
//! namespace only, where tenants cannot write.

use std::io::Read;

use base64::Engine;
use serde::Deserialize;

/// Largest decoded release accepted (a record is at most 1 MiB in etcd;
/// gzip could expand a hostile one much further).
const MAX_RELEASE_JSON: u64 = 8 << 20;

/// One object of a rendered manifest.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectRef {
    pub api_version: String,
    pub kind: String,
    /// Empty for cluster-scoped objects.
    pub namespace: String,
    pub name: String,
}

impl ObjectRef {
    pub fn describe(&self) -> String {
        if self.namespace.is_empty() {
            format!("{} {}", self.kind, self.name)
        } else {
            format!("{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

#[derive(Deserialize)]
struct Release {
    #[serde(default)]
    manifest: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Head {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    metadata: HeadMeta,
}

#[derive(Deserialize, Default)]
struct HeadMeta {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
}

/// The objects of a release record's `release` field (the Secret's data,
/// already base64-decoded once by the API client).
pub fn objects_from_record(release_field: &[u8]) -> Result<Vec<ObjectRef>, String> {
    let packed = base64::engine::general_purpose::STANDARD
        .decode(release_field)
        .map_err(|e| format!("the release record is not base64: {e}"))?;
    let mut json = Vec::new();
    if packed.starts_with(&[0x1f, 0x8b]) {
        flate2::read::GzDecoder::new(packed.as_slice())
            .take(MAX_RELEASE_JSON + 1)
            .read_to_end(&mut json)
            .map_err(|e| format!("the release record is not valid gzip: {e}"))?;
        if json.len() as u64 > MAX_RELEASE_JSON {
            return Err(format!("the release record expands past {MAX_RELEASE_JSON} bytes"));
        }
    } else {
        json = packed;
    }
    let release: Release =
        serde_json::from_slice(&json).map_err(|e| format!("the release record is not a release: {e}"))?;
    objects_from_manifest(&release.manifest)
}

/// The objects of a multi-document YAML manifest, in order, without duplicates.
pub fn objects_from_manifest(manifest: &str) -> Result<Vec<ObjectRef>, String> {
    let mut out: Vec<ObjectRef> = Vec::new();
    // Empty documents (a template that rendered nothing) are skipped by the parser.
    let heads: Vec<Head> =
        serde_saphyr::from_multiple(manifest).map_err(|e| format!("the manifest is not a list of objects: {e}"))?;
    for head in heads {
        if head.kind.is_empty() || head.metadata.name.is_empty() {
            continue;
        }
        let obj = ObjectRef {
            api_version: head.api_version,
            kind: head.kind,
            namespace: head.metadata.namespace.unwrap_or_default(),
            name: head.metadata.name,
        };
        if !out.contains(&obj) {
            out.push(obj);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const MANIFEST: &str = "---\n# Source: tinycode/templates/serviceaccount.yaml\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: \"dev-tinycode\"\n  namespace: \"team\"\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: \"tinycode:team:dev-cluster-role\"\n---\n# empty\n";

    fn record(manifest: &str, gzip: bool) -> Vec<u8> {
        let json = serde_json::to_vec(&serde_json::json!({"name": "r", "version": 3, "manifest": manifest})).unwrap();
        let packed = if gzip {
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            enc.write_all(&json).unwrap();
            enc.finish().unwrap()
        } else {
            json
        };
        base64::engine::general_purpose::STANDARD.encode(packed).into_bytes()
    }

    #[test]
    fn a_gzipped_record_yields_its_objects_with_scope() {
        let objs = objects_from_record(&record(MANIFEST, true)).unwrap();
        assert_eq!(objs.len(), 2);
        assert_eq!(objs[0].describe(), "ServiceAccount team/dev-tinycode");
        assert_eq!((objs[1].kind.as_str(), objs[1].namespace.as_str()), ("ClusterRoleBinding", ""));
        assert_eq!(objs, objects_from_record(&record(MANIFEST, false)).unwrap(), "plain JSON records too");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(objects_from_record(b"%%%").is_err());
        let not_gzip = base64::engine::general_purpose::STANDARD.encode([0x1f, 0x8b, 1, 2, 3]);
        assert!(objects_from_record(not_gzip.as_bytes()).is_err());
        assert!(objects_from_manifest("kind: [").is_err());
    }

    #[test]
    fn a_gzip_bomb_is_refused() {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        enc.write_all(b"{\"manifest\": \"").unwrap();
        enc.write_all(&vec![b' '; (MAX_RELEASE_JSON + 10) as usize]).unwrap();
        let bomb = base64::engine::general_purpose::STANDARD.encode(enc.finish().unwrap());
        assert!(objects_from_record(bomb.as_bytes()).unwrap_err().contains("expands past"));
    }
}
