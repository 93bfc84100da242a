//! A panic inside a gRPC handler answers that one request with `INTERNAL`
//! and is logged, instead of ending its HTTP/2 stream with a reset that a
//! client reports as a transport error. Both gRPC servers (the control
//! plane's, each sidecar's) are built with [`layer`]; the connection and
//! every other request on it go on. A panicking response stream is not
//! covered here: the streams of calls catch their handlers themselves
//! (`crate::calls`).

use std::any::Any;
use tonic::Status;
use tower_http::catch_panic::{CatchPanicLayer, ResponseForPanic};

/// The message an engine or the control plane gets; the panic's own text
/// stays in the server's log.
pub const MESSAGE: &str = "the request failed inside the server (a bug, logged there with its cause); nothing else is affected";

/// Answers a panic with `INTERNAL` ([`MESSAGE`]), trailers only, after one
/// log line at ERROR naming `server` and the panic's text.
#[derive(Debug, Clone, Copy)]
pub struct PanicToInternal {
    /// Which server answered: `control plane`, `sidecar`.
    pub server: &'static str,
}

impl ResponseForPanic for PanicToInternal {
    type ResponseBody = tonic::body::Body;

    fn response_for_panic(
        &mut self,
        err: Box<dyn Any + Send + 'static>,
    ) -> http::Response<Self::ResponseBody> {
        let cause = err
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| err.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("(not text)");
        tracing::error!(
            server = self.server,
            panic = cause,
            "a gRPC request's handler panicked: answered INTERNAL"
        );
        Status::internal(MESSAGE).into_http()
    }
}

/// The layer both gRPC servers put outermost: [`PanicToInternal`].
pub fn layer(server: &'static str) -> CatchPanicLayer<PanicToInternal> {
    CatchPanicLayer::custom(PanicToInternal { server })
}
