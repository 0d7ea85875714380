//! Namespace notification subscriptions (the `Admin` service's `SubscribeNamespace`
//! and `UnsubscribeNamespace`): a URL that gets the signed result of every run of
//! the namespace that closes, optionally only for some workflows and outcomes.
//! Managing them needs an admin key of the namespace, like updating it.

use super::Core;
use super::caller::{self, Credentials};
use crate::delivery::destination::Destinations;
use crate::error::ApiError;
use crate::writer::{Subscribe, Unsubscribe};
use railyard_model::Rejection;
use railyard_model::limits::check_name;
use railyard_model::namespace::{Namespace, Subscription};

/// Most workflows one subscription names.
pub const MAX_WORKFLOWS: usize = 64;

/// Refuses a delivery target while no signing secret is configured: every
/// delivery is signed, and an unsigned one could not be told from a forgery.
pub fn require_signing(core: &Core, field: &str) -> Result<(), ApiError> {
    if core.delivery.signing_secret.is_none() {
        return Err(ApiError::Rejected(Rejection::FailedPrecondition(format!(
            "{field}: this server cannot sign deliveries: set delivery.signing_secret in its configuration \
             (or RAILYARD_DELIVERY_SIGNING_SECRET)"
        ))));
    }
    Ok(())
}

/// Refuses a delivery URL whose host is a literal internal IP address the server's
/// `delivery.allow_networks` does not list, naming `field`. Names are checked by the
/// sender, on the addresses they resolve to (`engine::delivery::destination`).
pub fn check_destination(core: &Core, field: &str, url: &str) -> Result<(), ApiError> {
    let Ok(parsed) = url::Url::parse(url) else {
        return Ok(());
    };
    let ip = match parsed.host() {
        Some(url::Host::Ipv4(ip)) => std::net::IpAddr::V4(ip),
        Some(url::Host::Ipv6(ip)) => std::net::IpAddr::V6(ip),
        _ => return Ok(()),
    };
    let rules = Destinations::new(core.delivery.allow_networks.clone(), Vec::new());
    if rules.check_ip(ip).is_err() {
        return Err(ApiError::field(
            field,
            format!(
                "{ip} is an internal address (loopback, private, link-local or another special \
                 range), which this server does not deliver to; its delivery.allow_networks \
                 setting lists the networks it may"
            ),
        ));
    }
    Ok(())
}

/// Adds `sub` (its `created_ms` is set by the server) to namespace `name`.
pub async fn subscribe(
    core: &Core,
    credentials: &Credentials,
    name: &str,
    sub: Subscription,
) -> Result<Namespace, ApiError> {
    let name = caller::namespace_name(name);
    super::namespaces::admin(core, credentials, name)?;
    check_name("subscription.id", &sub.id)?;
    railyard_model::run::delivery::url::check("subscription.url", &sub.url)?;
    check_destination(core, "subscription.url", &sub.url)?;
    if sub.workflows.len() > MAX_WORKFLOWS {
        return Err(ApiError::field(
            "subscription.workflows",
            format!(
                "has {} entries, more than the limit of {MAX_WORKFLOWS}",
                sub.workflows.len()
            ),
        ));
    }
    for (i, w) in sub.workflows.iter().enumerate() {
        check_name(&format!("subscription.workflows[{i}]"), w)?;
    }
    for (i, o) in sub.outcomes.iter().enumerate() {
        if o.is_open() {
            return Err(ApiError::field(
                &format!("subscription.outcomes[{i}]"),
                "RUNNING is not an outcome: name a closed status (COMPLETED, FAILED, CANCELED, TERMINATED, TIMED_OUT)",
            ));
        }
    }
    require_signing(core, "subscription")?;
    let mut sub = sub;
    sub.outcomes.dedup();
    let id = sub.id.clone();
    let ns = core
        .writer
        .call(Subscribe {
            namespace: name.to_string(),
            subscription: sub,
        })
        .await?;
    tracing::info!(namespace = %name, subscription = %id, "notification subscription added");
    Ok(ns)
}

/// Removes subscription `id` from namespace `name`.
pub async fn unsubscribe(
    core: &Core,
    credentials: &Credentials,
    name: &str,
    id: &str,
) -> Result<Namespace, ApiError> {
    let name = caller::namespace_name(name);
    super::namespaces::admin(core, credentials, name)?;
    check_name("subscription_id", id)?;
    let ns = core
        .writer
        .call(Unsubscribe {
            namespace: name.to_string(),
            id: id.to_string(),
        })
        .await?;
    tracing::info!(namespace = %name, subscription = %id, "notification subscription removed");
    Ok(ns)
}
