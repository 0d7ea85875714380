//! The server's in-process gRPC channel: what runs inside the server process (the MCP
//! gateway on `/mcp`) calls the gRPC services without a network hop, so it works
//! whatever the gRPC listener speaks (plaintext, TLS, mutual TLS).
//!
//! Each connection the channel makes is a [`tokio::io::duplex`] pair: one half goes to
//! the client, the other to a tonic server serving the same services as the gRPC
//! listener (the same handlers, so the same authentication, authorization and
//! bounds). Only code in this process can make such a connection, which is why that
//! server believes the caller's certificate subject in the request's metadata
//! ([`crate::grpc::peer::PEER_SUBJECT`]): there is no TLS connection to take it from,
//! and the gateway sets it from its HTTP caller's verified certificate.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper_util::rt::TokioIo;
use tokio::io::DuplexStream;
use tokio::sync::mpsc;
use tonic::transport::{Channel, Endpoint, Uri};

/// Bytes in flight each way on one in-process connection before the writer waits.
const PIPE_BYTES: usize = 256 * 1024;
/// Connections waiting for the in-process server to take them.
const PENDING_CONNECTIONS: usize = 16;

/// Makes channels to the in-process server; [`pair`] makes it with the stream of
/// connections that server serves.
#[derive(Clone)]
pub struct InProcess {
    connections: mpsc::Sender<DuplexStream>,
}

/// A new [`InProcess`] and the server's side: the connections to serve.
pub fn pair() -> (InProcess, mpsc::Receiver<DuplexStream>) {
    let (connections, incoming) = mpsc::channel(PENDING_CONNECTIONS);
    (InProcess { connections }, incoming)
}

impl InProcess {
    /// A channel to the server's services; it connects on its first call (and again
    /// after a connection ends). Needs a tokio runtime.
    pub fn channel(&self) -> Channel {
        Endpoint::from_static("http://in-process.railyard")
            .connect_with_connector_lazy(Connector(self.connections.clone()))
    }
}

/// Makes one in-process connection per call: a duplex pair whose server half is
/// handed to the in-process server.
#[derive(Clone)]
struct Connector(mpsc::Sender<DuplexStream>);

impl tower::Service<Uri> for Connector {
    type Response = TokioIo<DuplexStream>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _uri: Uri) -> Self::Future {
        let connections = self.0.clone();
        Box::pin(async move {
            let (client, server) = tokio::io::duplex(PIPE_BYTES);
            connections.send(server).await.map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::ConnectionRefused,
                    "the server is shutting down",
                )
            })?;
            Ok(TokioIo::new(client))
        })
    }
}
