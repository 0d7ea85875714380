//! Namespaces over real gRPC with auth on: created, described, listed, updated and
//! deleted by the keys allowed to, and keys held to their namespace.

use std::collections::HashMap;

use railyard_proto::v1::ApiKeyRole;
use railyard_sdk::ClientError;

use crate::auth::secured;

#[tokio::test]
async fn namespaces_are_managed_by_admins_and_keys_stay_in_theirs() {
    let s = secured().await;
    let admin = s.admin().await;
    let team = admin.create_namespace("team", "the team's runs").await.unwrap();
    assert_eq!(
        (team.name.as_str(), team.description.as_str()),
        ("team", "the team's runs")
    );
    assert_ne!(team.create_time_unix_ms, 0);
    let names =
        |list: Vec<railyard_proto::v1::NamespaceInfo>| list.into_iter().map(|n| n.name).collect::<Vec<_>>();
    assert_eq!(names(admin.list_namespaces().await.unwrap()), ["default", "team"]);

    // A client key of `team` works there, and only there.
    let (client_key, client_id) = s.key("team", ApiKeyRole::Client, &[], 0).await;
    let client = s.client(Some(&client_key)).await;
    client
        .start_run("team", "one", "g", HashMap::new())
        .await
        .unwrap();
    match client.start_run("default", "one", "g", HashMap::new()).await {
        Err(ClientError::PermissionDenied(m)) => {
            assert_eq!(
                m,
                format!("API key {client_id} is for namespace \"team\", not \"default\"")
            )
        }
        other => panic!("{other:?}"),
    }

    // An admin of `team` describes and updates it, but makes and deletes no namespace.
    let (team_admin, _) = s.key("team", ApiKeyRole::Admin, &[], 0).await;
    let team_admin = s.client(Some(&team_admin)).await;
    assert_eq!(team_admin.describe_namespace("team").await.unwrap().name, "team");
    let updated = team_admin.update_namespace("team", "renamed").await.unwrap();
    assert_eq!(updated.description, "renamed");
    assert_eq!(names(team_admin.list_namespaces().await.unwrap()), ["team"]);
    for denied in [
        team_admin.create_namespace("mine", "").await.map(drop),
        team_admin.delete_namespace("team").await,
        team_admin.describe_namespace("default").await.map(drop),
        client.describe_namespace("team").await.map(drop),
    ] {
        assert!(
            matches!(denied, Err(ClientError::PermissionDenied(_))),
            "{denied:?}"
        );
    }

    // Only an empty namespace goes, and its keys go with it.
    match admin.delete_namespace("team").await {
        Err(ClientError::FailedPrecondition(m)) => assert!(m.contains("still holds runs"), "{m}"),
        other => panic!("{other:?}"),
    }
    admin.create_namespace("empty", "").await.unwrap();
    let (empty_key, empty_id) = s.key("empty", ApiKeyRole::Client, &[], 0).await;
    admin.delete_namespace("empty").await.unwrap();
    match s.client(Some(&empty_key)).await.list_workflows("empty").await {
        Err(ClientError::Unauthenticated(m)) => {
            assert!(m.contains(&format!("{empty_id} was revoked")), "{m}")
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        admin.describe_namespace("empty").await,
        Err(ClientError::NotFound(_))
    ));
    assert!(matches!(
        admin.start_run("empty", "one", "g", HashMap::new()).await,
        Err(ClientError::NotFound(_))
    ));
    assert_eq!(names(admin.list_namespaces().await.unwrap()), ["default", "team"]);

    // Bad requests name what is wrong and change nothing.
    match admin.delete_namespace("default").await {
        Err(ClientError::FailedPrecondition(m)) => assert!(m.contains("cannot be deleted"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        admin.create_namespace("team", "").await,
        Err(ClientError::AlreadyExists(_))
    ));
    match admin.create_namespace("no spaces", "").await {
        Err(ClientError::InvalidArgument(m)) => assert!(m.starts_with("name: "), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        admin.describe_namespace("team").await.unwrap().description,
        "renamed"
    );
}
