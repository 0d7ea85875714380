//! The triggers page shows each trigger's refused deliveries (and duplicates) with
//! the server's reason, newest first, escaped.

use crate::support::Console;

#[tokio::test]
async fn the_triggers_page_shows_refused_deliveries_with_their_reasons() {
    let console = Console::start(false).await;
    console.create_hook_trigger().await;
    let post = async |id: &str, body: &str| {
        reqwest::Client::new()
            .post(format!("http://{}/hooks/default/hook", console.server.http_addr))
            .header("content-type", "application/json")
            .header("x-github-delivery", id)
            .body(body.to_string())
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(post("d-1", r#"{"title":"t"}"#).await, 202);
    assert_eq!(
        post("\"><img src=x onerror=alert(1)>", "<script>alert(2)</script>").await,
        400
    );
    assert_eq!(post("d-3", r#"{"other":"x"}"#).await, 422);
    assert_eq!(post("d-1", r#"{"title":"t"}"#).await, 202);

    let mut b = console.browser();
    let page = b.get("/ui/triggers").await;
    assert_eq!(page.status, 200);
    assert_eq!(page.calls(), 1);
    let body = &page.body;
    assert!(body.contains("Refused lately"), "{body}");
    let at = |needle: &str| body.find(needle).unwrap_or_else(|| panic!("{needle} in {body}"));
    // Newest first: the duplicate, the template, the body that is not JSON.
    let (dup, unfilled, bad) = (
        at("<strong>duplicate</strong>"),
        at("<strong>unprocessable</strong>"),
        at("<strong>bad request</strong>"),
    );
    assert!(dup < unfilled && unfilled < bad);
    assert!(body.contains("the body is not JSON"));
    assert!(body.contains("the payload has no value at"));
    assert!(
        body.contains("&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"),
        "escaped id"
    );
    assert!(!body.contains("<img src=x") && !body.contains("<script>alert"));
}
