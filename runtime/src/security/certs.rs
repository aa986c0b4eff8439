//! A site's certificates (`lop certs`): one CA, one edge certificate for the names robots dial,
//! one certificate per robot whose common name is its robot id (what access control matches).
//!
//! Files written: `ca.pem`, `ca.key` (keep it off the robots), `edge.pem`, `edge.key`,
//! `robot-<id>.pem`, `robot-<id>.key`. Keys are ECDSA P-256, written mode 0600.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};

use super::EDGE_IDENTITY;
use crate::error::{Error, Result};

/// What to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertsRequest {
    /// Robot ids, one certificate each.
    pub robots: Vec<String>,
    /// Host names and IP addresses the edge certificate is valid for (what robots put in their
    /// `tls/HOST:PORT` endpoints); `localhost`, `127.0.0.1` and `::1` are always added.
    pub edge_names: Vec<String>,
    /// Days every certificate stays valid.
    pub days: u32,
}

/// The files written, in the order written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteCerts {
    /// Every file written.
    pub files: Vec<PathBuf>,
}

fn err(what: impl std::fmt::Display) -> Error {
    Error::InvalidConfig { what: format!("certificates: {what}") }
}

fn params(common_name: &str, days: u32) -> CertificateParams {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "LOP site");
    dn.push(DnType::CommonName, common_name);
    p.distinguished_name = dn;
    let now = time::OffsetDateTime::now_utc();
    p.not_before = now - time::Duration::days(1);
    p.not_after = now + time::Duration::days(i64::from(days));
    p
}

/// Makes a site CA and the certificates of `request` in `out` (created if missing). Existing
/// files are never overwritten: a site's CA is made once.
///
/// # Errors
/// [`Error::InvalidConfig`] for an invalid robot id, a bad edge name, no days, a file already
/// there, or a file that cannot be written (named).
pub fn make_site_certs(out: &Path, request: &CertsRequest) -> Result<SiteCerts> {
    if request.days == 0 {
        return Err(err("--days must be at least 1"));
    }
    for r in &request.robots {
        lop_msgs::validate_robot_id(r).map_err(err)?;
        // Its stream's lanes use <robot>.lane<k>: no robot of its own may be named so, and the
        // lanes' ids must be valid ids too.
        lop_msgs::lane_robot_id(r, lop_msgs::MAX_LANES - 1).map_err(err)?;
    }
    let mut names: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    for n in &request.edge_names {
        if !names.contains(n) {
            names.push(n.clone());
        }
    }
    let mut planned = vec!["ca.pem".to_string(), "ca.key".into(), "edge.pem".into(), "edge.key".into()];
    for r in &request.robots {
        planned.push(format!("robot-{r}.pem"));
        planned.push(format!("robot-{r}.key"));
    }
    std::fs::create_dir_all(out).map_err(|e| err(format!("{}: {e}", out.display())))?;
    if let Some(there) = planned.iter().map(|f| out.join(f)).find(|p| p.exists()) {
        return Err(err(format!("{} exists; a site's CA is made once (choose another --out)", there.display())));
    }

    let ca_key = KeyPair::generate().map_err(err)?;
    let mut ca = params("LOP site CA", request.days);
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let ca_cert = ca.self_signed(&ca_key).map_err(err)?;
    let issuer = Issuer::new(ca, &ca_key);

    let mut written = SiteCerts { files: Vec::new() };
    let mut write = |name: &str, text: &str, secret: bool| -> Result<()> {
        let path = out.join(name);
        write_new(&path, text, secret).map_err(|e| err(format!("{}: {e}", path.display())))?;
        written.files.push(path);
        Ok(())
    };
    write("ca.pem", &ca_cert.pem(), false)?;
    write("ca.key", &ca_key.serialize_pem(), true)?;

    let leaf = |cn: &str, sans: &[String], server: bool| -> Result<(String, String)> {
        let key = KeyPair::generate().map_err(err)?;
        let mut p = CertificateParams::new(sans.to_vec()).map_err(|e| err(format!("name {sans:?}: {e}")))?;
        let base = params(cn, request.days);
        (p.distinguished_name, p.not_before, p.not_after) = (base.distinguished_name, base.not_before, base.not_after);
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        p.extended_key_usages = if server {
            // Edges also connect to each other (a fleet): both roles.
            vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth]
        } else {
            vec![ExtendedKeyUsagePurpose::ClientAuth]
        };
        let cert = p.signed_by(&key, &issuer).map_err(err)?;
        Ok((cert.pem(), key.serialize_pem()))
    };
    let (cert, key) = leaf(EDGE_IDENTITY, &names, true)?;
    write("edge.pem", &cert, false)?;
    write("edge.key", &key, true)?;
    for r in &request.robots {
        let (cert, key) = leaf(r, std::slice::from_ref(r), false)?;
        write(&format!("robot-{r}.pem"), &cert, false)?;
        write(&format!("robot-{r}.key"), &key, true)?;
    }
    Ok(written)
}

fn write_new(path: &Path, text: &str, secret: bool) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(if secret { 0o600 } else { 0o644 });
    }
    let mut f = options.open(path)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_site_is_made_once_with_private_keys() {
        let dir = std::env::temp_dir().join(format!("lop-certs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let req =
            CertsRequest { robots: vec!["r1".into(), "r2".into()], edge_names: vec!["gpu-1.site".into(), "10.0.0.5".into()], days: 30 };
        let site = make_site_certs(&dir, &req).unwrap();
        assert_eq!(site.files.len(), 8);
        for f in ["ca.pem", "edge.pem", "robot-r1.pem", "robot-r2.pem"] {
            assert!(std::fs::read_to_string(dir.join(f)).unwrap().starts_with("-----BEGIN CERTIFICATE-----"), "{f}");
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(dir.join("robot-r1.key")).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "keys are private");
        }
        // Never overwritten.
        let again = make_site_certs(&dir, &req).unwrap_err().to_string();
        assert!(again.contains("exists"), "{again}");
        // Bad input is named.
        let bad = CertsRequest { robots: vec!["a b".into()], edge_names: vec![], days: 30 };
        assert!(make_site_certs(&dir.join("x"), &bad).is_err());
        // A robot named like another's stream lane (whose keys that robot's credentials may use).
        let lane = CertsRequest { robots: vec!["r1.lane2".into()], edge_names: vec![], days: 30 };
        let err = make_site_certs(&dir.join("y"), &lane).unwrap_err().to_string();
        assert!(err.contains("lane"), "{err}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
