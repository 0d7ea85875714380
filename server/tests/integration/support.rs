//! Fixtures shared by the integration tests: a server on free loopback ports with a
//! client connected to it, and its `/metrics` text.

use std::net::SocketAddr;

use railyard_sdk::Client;
use railyard_server::{RunningServer, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Starts a server with `config` on free loopback ports (its listen addresses are
/// set here) and connects a client to its gRPC listener.
pub async fn start(mut config: ServerConfig) -> (RunningServer, Client) {
    config.grpc_listen = "127.0.0.1:0".parse().unwrap();
    config.http_listen = "127.0.0.1:0".parse().unwrap();
    let server = RunningServer::start(config).await.unwrap();
    let client = Client::connect(&format!("http://{}", server.grpc_addr))
        .await
        .unwrap();
    (server, client)
}

/// The whole answer (head and body) to `GET /metrics` over HTTP/1.0 on `http_addr`.
pub async fn metrics(http_addr: SocketAddr) -> String {
    let mut conn = tokio::net::TcpStream::connect(http_addr).await.unwrap();
    conn.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").await.unwrap();
    let mut text = String::new();
    conn.read_to_string(&mut text).await.unwrap();
    text
}
