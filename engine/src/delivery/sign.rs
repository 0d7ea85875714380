//! The signature of a delivery: `Railyard-Signature: t=<unix seconds>,v1=<hex>`,
//! where `<hex>` is HMAC-SHA256, keyed with the server's signing secret, of
//! `<t>.<body>` (the timestamp, a dot, then the raw body bytes).
//!
//! A receiver verifies it by recomputing the HMAC over the same bytes with the same
//! secret and comparing in constant time, then refusing a `t` too far from its own
//! clock (which stops a captured request from being replayed later). [`verify`] does
//! exactly that.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// The header carrying the signature.
pub const SIGNATURE_HEADER: &str = "railyard-signature";

/// The delivery's signing key. Its `Debug` never shows it.
#[derive(Clone)]
pub struct SigningSecret(Vec<u8>);

impl SigningSecret {
    /// A secret from its text (used as UTF-8 bytes); `None` when empty.
    pub fn new(secret: &str) -> Option<Self> {
        (!secret.is_empty()).then(|| Self(secret.as_bytes().to_vec()))
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC takes keys of any length.
        match HmacSha256::new_from_slice(&self.0) {
            Ok(m) => m,
            Err(_) => unreachable!("HMAC accepts every key length"),
        }
    }
}

impl std::fmt::Debug for SigningSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningSecret(<redacted>)")
    }
}

/// The `Railyard-Signature` header value for `body` sent at `t` (Unix seconds).
pub fn sign(secret: &SigningSecret, t: i64, body: &[u8]) -> String {
    let mut mac = secret.mac();
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()))
}

/// Why a signature does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("the signature header is not `t=<unix seconds>,v1=<hex>`")]
    Malformed,
    #[error("the signature does not match the body")]
    Mismatch,
    #[error("the signature's time is {skew} s away from now, more than the tolerance")]
    Stale { skew: i64 },
}

/// Checks a `Railyard-Signature` header against `body`, at `now` (Unix seconds),
/// allowing `tolerance_s` of clock difference either way.
pub fn verify(
    secret: &SigningSecret,
    header: &str,
    body: &[u8],
    now: i64,
    tolerance_s: i64,
) -> Result<(), VerifyError> {
    let (mut t, mut v1) = (None, None);
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => t = v.parse::<i64>().ok(),
            Some(("v1", v)) => v1 = hex::decode(v).ok(),
            _ => {}
        }
    }
    let (Some(t), Some(sig)) = (t, v1) else {
        return Err(VerifyError::Malformed);
    };
    let mut mac = secret.mac();
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.verify_slice(&sig).map_err(|_| VerifyError::Mismatch)?;
    let skew = now.saturating_sub(t).saturating_abs();
    if skew > tolerance_s {
        return Err(VerifyError::Stale { skew });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_only_for_its_body_secret_and_time() {
        let s = SigningSecret::new("whsec").unwrap();
        let h = sign(&s, 1_700_000_000, b"{\"a\":1}");
        assert!(h.starts_with("t=1700000000,v1="), "{h}");
        assert_eq!(verify(&s, &h, b"{\"a\":1}", 1_700_000_010, 300), Ok(()));
        assert_eq!(
            verify(&s, &h, b"{\"a\":2}", 1_700_000_010, 300),
            Err(VerifyError::Mismatch)
        );
        let other = SigningSecret::new("other").unwrap();
        assert_eq!(
            verify(&other, &h, b"{\"a\":1}", 1_700_000_010, 300),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify(&s, &h, b"{\"a\":1}", 1_700_001_000, 300),
            Err(VerifyError::Stale { skew: 1000 })
        );
        assert_eq!(verify(&s, "v1=00", b"", 0, 300), Err(VerifyError::Malformed));
        assert_eq!(verify(&s, "t=1,v1=zz", b"", 1, 300), Err(VerifyError::Malformed));
        // RFC 4231 test case 2: HMAC-SHA256(key "Jefe", "what do ya want for nothing?").
        let jefe = SigningSecret::new("Jefe").unwrap();
        let mut mac = jefe.mac();
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert!(format!("{s:?}").contains("redacted"));
        assert_eq!(SigningSecret::new("").map(|_| ()), None);
    }
}
