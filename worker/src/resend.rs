//! The resend rule of the worker's own clients (HTTP/1.1 and h2c): a request the server
//! did not process on a reused connection (its keep-alive timeout closed it, a GOAWAY
//! below its stream, REFUSED_STREAM) goes once more on a fresh connection; never on a
//! fresh one, never after a response byte, never a third time.

use llmsurge_proto::{ErrorKind, RequestError};

/// Why an attempt failed.
#[derive(Debug)]
pub enum Fault {
    /// The server did not process the request and no byte of a response arrived: sent
    /// once more when the connection was reused.
    Undelivered(String),
    /// Anything else.
    Failed(RequestError),
}

/// After an attempt on a connection (`reused` or fresh) failed: `Ok` to send once more
/// on a fresh connection (`retried` now set, the request's record says so), or the
/// request's error, which names a resend that failed too.
pub fn once_more(fault: Fault, reused: bool, retried: &mut bool) -> Result<(), RequestError> {
    match fault {
        Fault::Undelivered(message) if reused && !*retried => {
            tracing::debug!(%message, "request not processed on a reused connection; sending once more on a fresh one");
            *retried = true;
            Ok(())
        }
        Fault::Undelivered(message) => Err(RequestError {
            kind: ErrorKind::ConnectionClosed,
            message: if *retried {
                format!("{message} (also on a fresh connection, after the reused one closed)")
            } else {
                message
            },
        }),
        Fault::Failed(mut e) => {
            if *retried && e.kind == ErrorKind::ConnectionClosed {
                e.message
                    .push_str(" (on a fresh connection, after the reused one closed)");
            }
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_undelivered_request_on_a_reused_connection_goes_once_more() {
        let mut retried = false;
        let undelivered = || Fault::Undelivered("connection closed".into());
        assert!(
            once_more(undelivered(), false, &mut retried).is_err(),
            "fresh"
        );
        assert!(!retried);
        assert!(once_more(undelivered(), true, &mut retried).is_ok());
        assert!(retried);
        // The resend failed too: never a third time, and the message says both.
        let e = once_more(undelivered(), true, &mut retried).expect_err("third");
        assert_eq!(e.kind, ErrorKind::ConnectionClosed);
        assert!(
            e.message
                .ends_with("(also on a fresh connection, after the reused one closed)")
        );
        let failed = Fault::Failed(RequestError {
            kind: ErrorKind::ConnectionClosed,
            message: "reset".into(),
        });
        let e = once_more(failed, true, &mut retried).expect_err("failed");
        assert_eq!(
            e.message,
            "reset (on a fresh connection, after the reused one closed)"
        );
    }
}
