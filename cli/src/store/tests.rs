use std::path::PathBuf;

use clap::Parser;

use super::*;
use crate::{Cli, Command};

fn parse(args: &[&str]) -> Result<StoreCommand, String> {
    let cli = Cli::try_parse_from(args).map_err(|e| e.to_string())?;
    match cli.command {
        Command::Store(c) => Ok(c),
        other => Err(format!("not a store command: {other:?}")),
    }
}

#[test]
fn the_store_is_named_as_the_server_names_it() {
    let StoreCommand::Export(a) = parse(&["railyard", "store", "export", "--data-dir", "/srv/ry"]).unwrap()
    else {
        panic!("not an export");
    };
    assert_eq!(
        a.store.store().unwrap(),
        StoreSetting::Redb(PathBuf::from("/srv/ry"))
    );
    let url = "postgres://ry:s3cret@db:5432/railyard";
    let StoreCommand::Import(a) =
        parse(&["railyard", "store", "import", "--store", url, "--replace"]).unwrap()
    else {
        panic!("not an import");
    };
    assert!(a.replace);
    assert_eq!(a.store.store().unwrap(), StoreSetting::Postgres(url.into()));
    // Both, or neither kind: refused as the server refuses them, the password unshown.
    let StoreCommand::Import(a) =
        parse(&["railyard", "store", "import", "--store", url, "--data-dir", "d"]).unwrap()
    else {
        panic!("not an import");
    };
    let e = a.store.store().unwrap_err().to_string();
    assert!(e.contains("server.store") && e.contains("server.data_dir"), "{e}");
    let StoreCommand::Export(a) =
        parse(&["railyard", "store", "export", "--store", "mysql://ry:s3cret@db/x"]).unwrap()
    else {
        panic!("not an export");
    };
    let e = a.store.store().unwrap_err().to_string();
    assert!(
        e.contains("neither redb:DIR nor postgres://") && !e.contains("s3cret"),
        "{e}"
    );
}

#[test]
fn replace_is_import_only() {
    assert!(parse(&["railyard", "store", "export", "--replace"]).is_err());
}
