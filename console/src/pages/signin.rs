//! `/ui/signin` and `/ui/signout`: the sign-in form (no session needed: its CSRF
//! token is a double-submit cookie), the key checked by what the server lets it do,
//! and the session held for it ([`crate::session`]).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use railyard_proto::v1 as pb;
use railyard_sdk::{ApiKey, ClientError};
use subtle::ConstantTimeEq;

use crate::Shared;
use crate::api::{self, Api};
use crate::layout;
use crate::session::{
    COOKIE, CSRF_FIELD, PEER_SUBJECT, Role, SIGNIN_COOKIE, Viewer, cookie_value, random_token, same_origin,
    set_cookie,
};

/// The sign-in form's fields.
#[derive(serde::Deserialize)]
pub(crate) struct SignIn {
    key: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    csrf: String,
}

/// `GET /ui/signin`: the form, with a fresh double-submit token.
pub(crate) async fn page(State(shared): State<Arc<Shared>>) -> Response {
    signin_form(&shared, StatusCode::OK, None)
}

fn signin_form(shared: &Shared, status: StatusCode, error: Option<&str>) -> Response {
    let token = random_token();
    let body = html! {
        h1 { "Sign in" }
        @if let Some(error) = error {
            p.refusal role="alert" { (error) }
        }
        @if !shared.config.auth {
            p { "This server runs without auth: you can use the console without signing in. " a href="/ui/runs" { "Go to runs" } }
        }
        form method="post" action="/ui/signin" {
            input type="hidden" name=(CSRF_FIELD) value=(token);
            label for="key" { "API key" }
            input #key type="password" name="key" autocomplete="off" required;
            label for="namespace" { "Namespace" }
            input #namespace type="text" name="namespace" value=(railyard_proto::DEFAULT_NAMESPACE);
            button type="submit" { "Sign in" }
        }
    };
    let mut response = (status, layout::bare("Sign in", body)).into_response();
    response.headers_mut().append(
        header::SET_COOKIE,
        set_cookie(SIGNIN_COOKIE, &token, shared.config.tls, Some(600)),
    );
    response
}

/// `POST /ui/signin`: checks the key by what the server lets it do in the namespace
/// (an admin's call, then a client's), and holds a session for it.
pub(crate) async fn signin(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    axum::Form(form): axum::Form<SignIn>,
) -> Response {
    if !same_origin(&headers) {
        return (StatusCode::FORBIDDEN, "a form from another origin is refused\n").into_response();
    }
    let expected = cookie_value(&headers, SIGNIN_COOKIE).unwrap_or("");
    if expected.is_empty() || !bool::from(form.csrf.as_bytes().ct_eq(expected.as_bytes())) {
        return signin_form(
            &shared,
            StatusCode::FORBIDDEN,
            Some("The sign-in form expired or came from elsewhere: try again."),
        );
    }
    let key = ApiKey::new(form.key);
    let namespace = match form.namespace.trim() {
        "" => railyard_proto::DEFAULT_NAMESPACE.to_string(),
        ns => ns.to_string(),
    };
    let peer = headers.get(PEER_SUBJECT).and_then(|v| v.to_str().ok());
    let api = match Api::new(&shared.client, Some(&key), peer, namespace.clone(), api::SIGN_IN) {
        Ok(api) => api,
        Err(e) => return signin_form(&shared, StatusCode::UNAUTHORIZED, Some(&e.to_string())),
    };
    let role = match api.list_keys(String::new()).await {
        Ok(_) => Role::Admin,
        Err(ClientError::Unauthenticated(m)) => {
            return signin_form(
                &shared,
                StatusCode::UNAUTHORIZED,
                Some(&format!("unauthenticated: {m}")),
            );
        }
        Err(_) => match api
            .list_runs(pb::ListRunsRequest {
                page_size: 1,
                ..Default::default()
            })
            .await
        {
            Ok(_) => Role::Client,
            Err(e) => return signin_form(&shared, StatusCode::FORBIDDEN, Some(&e.to_string())),
        },
    };
    let Some(id) = shared.sessions.create(Some(key), namespace, role) else {
        return signin_form(
            &shared,
            StatusCode::SERVICE_UNAVAILABLE,
            Some("The console holds as many sessions as it may, all of admins: try again later."),
        );
    };
    tracing::info!(?role, "console: signed in");
    let mut response = Redirect::to("/ui/runs").into_response();
    let headers = response.headers_mut();
    headers.append(
        header::SET_COOKIE,
        set_cookie(COOKIE, &id, shared.config.tls, None),
    );
    headers.append(
        header::SET_COOKIE,
        set_cookie(SIGNIN_COOKIE, "", shared.config.tls, Some(0)),
    );
    response
}

/// The sign-out form's fields.
#[derive(serde::Deserialize)]
pub(crate) struct SignOut {
    #[serde(default)]
    csrf: String,
}

/// `POST /ui/signout`: drops the session and its cookie.
pub(crate) async fn signout(
    viewer: Viewer,
    headers: HeaderMap,
    axum::Form(form): axum::Form<SignOut>,
) -> Response {
    if !viewer.csrf_matches(&form.csrf) {
        return layout::csrf_refused(&viewer);
    }
    viewer.end_session(&headers);
    let mut response = Redirect::to("/ui/signin").into_response();
    response
        .headers_mut()
        .append(header::SET_COOKIE, set_cookie(COOKIE, "", viewer.tls(), Some(0)));
    response
}
