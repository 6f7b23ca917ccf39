//! A WebSocket client for the tests, and a handler that echoes.

use std::net::SocketAddr;
use std::time::Duration;

use futures_util::StreamExt;
use suprnova::async_trait;
use suprnova::ws::{Message, WebSocket, WebSocketHandler};
use tokio::net::{TcpSocket, TcpStream};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Error as WsError;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use super::within;

/// A client's socket.
pub type Client = WebSocketStream<TcpStream>;

/// Sends every text message back, prefixed with the socket's client address.
pub struct Echo;

#[async_trait]
impl WebSocketHandler for Echo {
    async fn on_socket(&self, mut socket: WebSocket) {
        let who = socket
            .client_ip()
            .map(|ip| ip.to_string())
            .unwrap_or_default();
        while let Some(Ok(message)) = socket.recv().await {
            if let Message::Text(text) = message {
                let reply = format!("{who} {}", text.as_str());
                if socket.send(reply).await.is_err() {
                    break;
                }
            }
        }
    }
}

/// Opens a WebSocket to `path` from the local address `from`, the
/// handshake carrying `headers` besides its own; within 5 s.
pub async fn connect_with(
    server: SocketAddr,
    from: &str,
    path: &str,
    headers: &[(&'static str, &str)],
) -> Result<Client, WsError> {
    let socket = if server.is_ipv4() {
        TcpSocket::new_v4().unwrap()
    } else {
        TcpSocket::new_v6().unwrap()
    };
    socket
        .bind(SocketAddr::new(from.parse().unwrap(), 0))
        .unwrap();
    let stream = socket.connect(server).await.unwrap();
    let mut request = format!("ws://{server}{path}")
        .into_client_request()
        .unwrap();
    for (name, value) in headers {
        request
            .headers_mut()
            .insert(*name, http::HeaderValue::from_str(value).unwrap());
    }
    within(
        "the handshake",
        Duration::from_secs(5),
        tokio_tungstenite::client_async(request, stream),
    )
    .await
    .map(|(client, _response)| client)
}

/// The HTTP answer a refused handshake got: status, body, headers.
pub fn refusal(result: Result<Client, WsError>) -> (u16, String, http::HeaderMap) {
    match result {
        Err(WsError::Http(response)) => {
            let status = response.status().as_u16();
            let headers = response.headers().clone();
            let body = response
                .into_body()
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            (status, body, headers)
        }
        Err(other) => panic!("expected an HTTP refusal, got {other}"),
        Ok(_) => panic!("expected an HTTP refusal, the socket opened"),
    }
}

/// The next message, which must be text, within 5 s.
pub async fn next_text(client: &mut Client) -> String {
    let message = within("a message", Duration::from_secs(5), client.next())
        .await
        .expect("the socket ended")
        .expect("the socket failed");
    match message {
        Message::Text(text) => text.as_str().to_owned(),
        other => panic!("expected text, got {other:?}"),
    }
}

/// Closes from the client side and reads until the server's close answer,
/// within 5 s.
pub async fn close(mut client: Client) {
    client.close(None).await.unwrap();
    within("the close handshake", Duration::from_secs(5), async {
        while let Some(Ok(_)) = client.next().await {}
    })
    .await;
}
