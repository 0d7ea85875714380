//! Task tokens (`engine/src/token/mod.rs`): arbitrary strings, mutated real tokens,
//! swapped halves, spliced tokens and tokens signed with other keys are refused
//! without a panic; exactly the tokens the server's keys signed verify, and they
//! give back their claims.

use railyard_model::Rejection;
use std::path::Path;
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use railyard_engine::error::ApiError;
use railyard_engine::token::TokenKeys;
use railyard_model::token::TokenClaims;

use crate::corpus::{self, Mutation};

/// Longest refusal message: a forged token must not be echoed back whole.
pub const MAX_MESSAGE: usize = 512;

/// The key file the corpus tokens were signed with: `k1` signs, `k0` (an older
/// key) still verifies.
pub const KEYS_JSON: &str = r#"{"active":"k1","keys":{
  "k0":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8",
  "k1":"ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8"}}"#;

/// The keys a case uses: the server's (`k1` active, `k0` verifying), the server's
/// with `k0` active (a token from before a rotation), and two strangers: another
/// key under the id `k1`, and an unknown id `k9`.
pub struct Keys {
    pub server: TokenKeys,
    pub before_rotation: TokenKeys,
    pub impostor: TokenKeys,
    pub unknown: TokenKeys,
}

fn load(dir: &Path, json: &str) -> TokenKeys {
    std::fs::write(dir.join("keys.json"), json).expect("write keys.json");
    TokenKeys::load_or_create(dir).expect("load keys.json")
}

impl Keys {
    /// Loads the four key sets through the server's own key-file loader.
    pub fn load() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        Self {
            server: load(dir.path(), KEYS_JSON),
            before_rotation: load(
                dir.path(),
                &KEYS_JSON.replace("\"active\":\"k1\"", "\"active\":\"k0\""),
            ),
            impostor: load(
                dir.path(),
                r#"{"active":"k1","keys":{"k1":"QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl8"}}"#,
            ),
            unknown: load(
                dir.path(),
                r#"{"active":"k9","keys":{"k9":"YGFiY2RlZmdoaWprbG1ub3BxcnN0dXZ3eHl6e3x9fn8"}}"#,
            ),
        }
    }

    fn signer(&self, s: Signer) -> &TokenKeys {
        match s {
            Signer::Server => &self.server,
            Signer::BeforeRotation => &self.before_rotation,
            Signer::Impostor => &self.impostor,
            Signer::Unknown => &self.unknown,
        }
    }
}

/// Who signs a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signer {
    Server,
    BeforeRotation,
    Impostor,
    Unknown,
}

/// One input to [`check`].
#[derive(Debug, Clone)]
pub enum TokenInput {
    /// Any text (arbitrary, or a mutated corpus token).
    Raw(String),
    /// `base64(json).base64(bytes)`: well-formed halves around any JSON.
    Encoded { json: String, sig: Vec<u8> },
    /// A freshly signed token.
    Signed(TokenClaims, Signer),
    /// A signed token, then mutated byte by byte.
    Mutated(TokenClaims, Signer, Vec<Mutation>),
    /// `signature.payload`.
    Swapped(TokenClaims, Signer),
    /// The payload of one token with the signature of another.
    Spliced(TokenClaims, TokenClaims, Signer),
}

fn claims() -> impl Strategy<Value = TokenClaims> {
    let text = prop_oneof![
        4 => "[a-z0-9-]{1,12}",
        1 => ".{0,24}",
        1 => Just(String::new()),
        1 => Just("..".to_string()),
    ];
    (text.clone(), text.clone(), text, any::<u32>(), any::<u64>()).prop_map(
        |(namespace, run_id, step, attempt, lease)| TokenClaims {
            namespace,
            run_id,
            step,
            attempt,
            lease,
            kid: String::new(),
        },
    )
}

fn signer() -> impl Strategy<Value = Signer> {
    prop_oneof![
        3 => Just(Signer::Server),
        1 => Just(Signer::BeforeRotation),
        1 => Just(Signer::Impostor),
        1 => Just(Signer::Unknown),
    ]
}

/// Generated and mutated inputs, `seeds` being the corpus tokens.
pub fn strategy(seeds: Arc<Vec<Vec<u8>>>) -> impl Strategy<Value = TokenInput> {
    let json = prop_oneof![
        Just(r#"{"ns":"default","run":"r","step":"s","att":1,"lease":1,"kid":"k1"}"#.to_string()),
        "\\{\"ns\":\"[a-z]{0,4}\",\"run\":\"r\",\"step\":\"s\",\"att\":[0-9]{1,3},\"lease\":[0-9]{1,3},\"kid\":\".{0,300}\"\\}",
        ".{0,64}",
        (0usize..3).prop_map(|n| format!(
            r#"{{"ns":"default","run":"r","step":"s","att":1,"lease":1,"kid":"{}"}}"#,
            "k".repeat([2, 600, 100_000][n])
        )),
    ];
    prop_oneof![
        2 => ".{0,200}".prop_map(TokenInput::Raw),
        1 => "[A-Za-z0-9_=+/-]{0,120}\\.[A-Za-z0-9_=+/-]{0,60}".prop_map(TokenInput::Raw),
        3 => corpus::mutated_text(seeds.clone()).prop_map(TokenInput::Raw),
        1 => corpus::seed_text(seeds).prop_map(TokenInput::Raw),
        2 => (json, prop::collection::vec(any::<u8>(), 0..40))
            .prop_map(|(json, sig)| TokenInput::Encoded { json, sig }),
        3 => (claims(), signer()).prop_map(|(c, s)| TokenInput::Signed(c, s)),
        4 => (claims(), signer(), prop::collection::vec(corpus::mutation(), 1..4))
            .prop_map(|(c, s, m)| TokenInput::Mutated(c, s, m)),
        1 => (claims(), signer()).prop_map(|(c, s)| TokenInput::Swapped(c, s)),
        1 => (claims(), claims(), signer()).prop_map(|(a, b, s)| TokenInput::Spliced(a, b, s)),
    ]
}

/// The token text of an input.
fn text(keys: &Keys, input: &TokenInput) -> String {
    match input {
        TokenInput::Raw(t) => t.clone(),
        TokenInput::Encoded { json, sig } => format!("{}.{}", B64.encode(json), B64.encode(sig)),
        TokenInput::Signed(c, s) => keys.signer(*s).sign(c),
        TokenInput::Mutated(c, s, ms) => {
            let mut bytes = keys.signer(*s).sign(c).into_bytes();
            for m in ms {
                corpus::apply(&mut bytes, m, &[]);
            }
            String::from_utf8_lossy(&bytes).into_owned()
        }
        TokenInput::Swapped(c, s) => {
            let t = keys.signer(*s).sign(c);
            let (p, sig) = t.split_once('.').unwrap_or((&t, ""));
            format!("{sig}.{p}")
        }
        TokenInput::Spliced(a, b, s) => {
            let (ta, tb) = (keys.signer(*s).sign(a), keys.signer(*s).sign(b));
            let p = ta.split_once('.').map_or(ta.as_str(), |x| x.0);
            let sig = tb.split_once('.').map_or("", |x| x.1);
            format!("{p}.{sig}")
        }
    }
}

/// The property: `verify` never panics; it accepts a token exactly when one of the
/// server's keys signed those very bytes (so the token is what signing its claims
/// gives), refuses everything else with `PERMISSION_DENIED` (`INVALID_ARGUMENT`
/// when empty) and a short message, and a token the server signed round-trips.
pub fn check(keys: &Keys, input: &TokenInput) -> Result<(), TestCaseError> {
    let token = text(keys, input);
    match keys.server.verify(&token) {
        Ok(claims) => {
            let signer = match claims.kid.as_str() {
                "k1" => &keys.server,
                "k0" => &keys.before_rotation,
                other => {
                    return Err(TestCaseError::fail(format!(
                        "accepted a token of key id {other:?}"
                    )));
                }
            };
            prop_assert_eq!(
                &signer.sign(&claims),
                &token,
                "accepted a token that is not the signature of its claims"
            );
        }
        Err(e) => {
            let message = e.to_string();
            prop_assert!(
                message.len() <= MAX_MESSAGE,
                "a refusal of {} bytes echoes the token: {}…",
                message.len(),
                message.chars().take(120).collect::<String>()
            );
            prop_assert!(message.starts_with("task_token"), "names no field: {message}");
            match e {
                ApiError::Rejected(Rejection::InvalidArgument(_)) => prop_assert!(token.is_empty()),
                ApiError::Rejected(Rejection::PermissionDenied(_)) => prop_assert!(!token.is_empty()),
                other => return Err(TestCaseError::fail(format!("refused as {other:?}"))),
            }
        }
    }
    // What the server's keys sign, they verify, claims and all.
    if let TokenInput::Signed(c, s @ (Signer::Server | Signer::BeforeRotation)) = input {
        let got = keys.server.verify(&token);
        let want_kid = if *s == Signer::Server { "k1" } else { "k0" };
        let want = TokenClaims {
            kid: want_kid.to_string(),
            ..c.clone()
        };
        prop_assert_eq!(got.ok(), Some(want), "a signed token does not round-trip");
    }
    if let TokenInput::Signed(_, Signer::Impostor | Signer::Unknown) = input {
        prop_assert!(keys.server.verify(&token).is_err(), "a stranger's token verified");
    }
    Ok(())
}
