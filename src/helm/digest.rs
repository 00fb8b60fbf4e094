//! The rendering digest: what, besides the values, decides what helm
//! renders. The chart's own digest (its Chart.yaml version and a hash of every
//! file) joins the values hash, so a new chart re-renders every instance, not
//! only those whose spec changed. The operator's version does not: a new
//! operator that renders the same values and chart runs no helm.

use std::path::Path;

use sha2::{Digest, Sha256};

/// `<Chart.yaml version>+<sha256 of every file, by relative path>`.
pub fn chart_digest(chart: &Path) -> std::io::Result<String> {
    let mut files = Vec::new();
    collect(chart, chart, &mut files)?;
    files.sort();
    let mut hasher = Sha256::new();
    for rel in &files {
        let bytes = std::fs::read(chart.join(rel))?;
        hasher.update(rel.as_bytes());
        hasher.update([0]);
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(&bytes);
    }
    let version = std::fs::read_to_string(chart.join("Chart.yaml"))?
        .lines()
        .find_map(|l| l.strip_prefix("version:").map(|v| v.trim().trim_matches('"').to_string()))
        .unwrap_or_default();
    Ok(format!("{version}+{}", &hex::encode(hasher.finalize())[..16]))
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<String>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            collect(root, &path, out)?;
        } else {
            out.push(path.strip_prefix(root).unwrap_or(&path).to_string_lossy().into_owned());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(dir: &Path, version: &str, template: &str) {
        std::fs::create_dir_all(dir.join("templates")).unwrap();
        std::fs::write(dir.join("Chart.yaml"), format!("apiVersion: v2\nname: t\nversion: {version}\n")).unwrap();
        std::fs::write(dir.join("templates/a.yaml"), template).unwrap();
    }

    #[test]
    fn any_chart_change_changes_the_digest() {
        let d = tempfile::tempdir().unwrap();
        chart(d.path(), "0.1.0", "a");
        let first = chart_digest(d.path()).unwrap();
        assert!(first.starts_with("0.1.0+"), "{first}");
        assert_eq!(first, chart_digest(d.path()).unwrap(), "stable");
        chart(d.path(), "0.1.0", "b");
        let template_changed = chart_digest(d.path()).unwrap();
        assert_ne!(first, template_changed);
        chart(d.path(), "0.1.1", "b");
        assert_ne!(template_changed, chart_digest(d.path()).unwrap());
    }

    #[test]
    fn the_bundled_chart_has_a_digest() {
        let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("helm-charts/tinycode");
        assert!(chart_digest(&here).unwrap().contains('+'));
        assert!(chart_digest(Path::new("/nonexistent")).is_err());
    }
}
