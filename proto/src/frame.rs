//! Length-prefixed msgpack frames, the unit of every IPC exchange.
//!
//! A frame is a 4-byte big-endian body length followed by a msgpack body encoded with
//! named fields (so a field added on one side is visible, not silently misread). Frames
//! larger than [`MAX_FRAME_LEN`] are refused on both ends: a corrupt length must not make
//! a process allocate gigabytes.

use bytes::{Buf, BytesMut};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The largest body a frame may carry.
pub const MAX_FRAME_LEN: usize = 64 << 20;
/// Bytes of the length prefix.
pub const HEADER_LEN: usize = 4;

/// Errors encoding or decoding a frame.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The body could not be encoded.
    #[error("encoding an IPC frame: {0}")]
    Encode(#[from] rmp_serde::encode::Error),
    /// The body could not be decoded.
    #[error("decoding an IPC frame: {0}")]
    Decode(#[from] rmp_serde::decode::Error),
    /// The frame is over the size limit.
    #[error("IPC frame of {0} bytes is over the {MAX_FRAME_LEN}-byte limit")]
    TooLarge(usize),
}

/// Appends one frame holding `msg` to `out`.
pub fn encode_frame<T: Serialize + ?Sized>(msg: &T, out: &mut Vec<u8>) -> Result<(), FrameError> {
    let start = out.len();
    out.extend_from_slice(&[0; HEADER_LEN]);
    if let Err(e) = rmp_serde::encode::write_named(out, msg) {
        out.truncate(start);
        return Err(e.into());
    }
    let body = out.len() - start - HEADER_LEN;
    if body > MAX_FRAME_LEN {
        out.truncate(start);
        return Err(FrameError::TooLarge(body));
    }
    out[start..start + HEADER_LEN].copy_from_slice(&(body as u32).to_be_bytes());
    Ok(())
}

/// Takes one complete frame off the front of `buf`, or returns `None` when more bytes are
/// needed. A frame that fails to decode is consumed, so the stream stays aligned.
pub fn decode_frame<T: DeserializeOwned>(buf: &mut BytesMut) -> Result<Option<T>, FrameError> {
    let Some(header) = buf.get(..HEADER_LEN) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
    if len > MAX_FRAME_LEN {
        return Err(FrameError::TooLarge(len));
    }
    if buf.len() < HEADER_LEN + len {
        buf.reserve(HEADER_LEN + len - buf.len());
        return Ok(None);
    }
    buf.advance(HEADER_LEN);
    let body = buf.split_to(len);
    Ok(Some(rmp_serde::from_slice(&body)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Ping {
        seq: u32,
        name: String,
    }

    /// Golden bytes: the frame header and the named-field msgpack body.
    #[test]
    fn wire_format_is_pinned() {
        let mut out = Vec::new();
        encode_frame(
            &Ping {
                seq: 7,
                name: "a".into(),
            },
            &mut out,
        )
        .expect("encode");
        assert_eq!(
            out,
            [
                0, 0, 0, 13,   // body length
                0x82, // map of 2
                0xa3, b's', b'e', b'q', 0x07, // "seq": 7
                0xa4, b'n', b'a', b'm', b'e', 0xa1, b'a', // "name": "a"
            ]
        );
    }

    #[test]
    fn frames_round_trip_across_arbitrary_splits() {
        let mut wire = Vec::new();
        for seq in 0..50 {
            encode_frame(
                &Ping {
                    seq,
                    name: "x".repeat(seq as usize),
                },
                &mut wire,
            )
            .expect("encode");
        }
        for chunk in [1, 3, 7, 64, wire.len()] {
            let mut buf = BytesMut::new();
            let mut got = Vec::new();
            for piece in wire.chunks(chunk) {
                buf.extend_from_slice(piece);
                while let Some(p) = decode_frame::<Ping>(&mut buf).expect("decode") {
                    got.push(p.seq);
                }
            }
            assert_eq!(got, (0..50).collect::<Vec<_>>(), "chunk size {chunk}");
            assert!(buf.is_empty());
        }
    }

    #[test]
    fn an_oversized_length_is_refused_before_allocating() {
        let mut buf = BytesMut::from(&[0xff, 0xff, 0xff, 0xff, 0][..]);
        assert!(matches!(
            decode_frame::<Ping>(&mut buf),
            Err(FrameError::TooLarge(_))
        ));
    }

    mod properties {
        use super::super::{decode_frame, encode_frame};
        use crate::clock::MonoNanos;
        use crate::messages::{FromWorker, ToWorker, UpdateBatch};
        use crate::metrics::{Metric, MetricSet, StatusClass};
        use crate::record::RequestStarted;
        use bytes::BytesMut;
        use proptest::prelude::*;

        fn started() -> impl Strategy<Value = RequestStarted> {
            (
                any::<u64>(),
                any::<u64>(),
                any::<u64>(),
                any::<Option<u16>>(),
            )
                .prop_map(|(slot, s, t, model)| RequestStarted {
                    slot,
                    scheduled: MonoNanos(s),
                    start: MonoNanos(t),
                    model,
                    session: None,
                    prompt_tokens: None,
                    max_output_tokens: None,
                })
        }

        /// Messages a worker sends, with arbitrary contents, histograms included.
        fn from_worker() -> impl Strategy<Value = FromWorker> {
            prop_oneof![
                (any::<u32>(), any::<u32>()).prop_map(|(protocol_version, pid)| {
                    FromWorker::Hello {
                        protocol_version,
                        pid,
                    }
                }),
                Just(FromWorker::Ready),
                ".{0,40}".prop_map(|message| FromWorker::Failed { message }),
                (".{0,40}", any::<bool>())
                    .prop_map(|(reason, terminated)| FromWorker::Finished { reason, terminated }),
                (
                    prop::collection::vec(started(), 0..20),
                    prop::collection::vec(1u64..1 << 40, 0..50),
                )
                    .prop_map(|(started, values)| {
                        let mut set = MetricSet::new();
                        for v in values {
                            set.record(StatusClass::Successful, Metric::Ttft, v);
                        }
                        let metrics = set.encode().expect("encode histograms");
                        FromWorker::Update(UpdateBatch {
                            started,
                            finished: Vec::new(),
                            // The per-model copy travels beside the whole (`--lora`).
                            model_metrics: vec![crate::messages::ModelMetrics {
                                model: 1,
                                metrics: metrics.clone(),
                            }],
                            metrics,
                        })
                    }),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(128))]

            /// Any sequence of messages comes back equal, in order, however the byte
            /// stream is cut on the way.
            #[test]
            fn frames_round_trip(
                msgs in prop::collection::vec(from_worker(), 0..10),
                t0 in any::<u64>(),
                cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..16),
            ) {
                let mut wire = Vec::new();
                for m in &msgs {
                    encode_frame(m, &mut wire).expect("encode");
                }
                let mut at: Vec<usize> = cuts.iter().map(|i| i.index(wire.len() + 1)).collect();
                at.sort_unstable();
                at.push(wire.len());
                let (mut buf, mut got, mut from) = (BytesMut::new(), Vec::new(), 0);
                for cut in at {
                    buf.extend_from_slice(&wire[from..cut]);
                    from = cut;
                    while let Some(m) = decode_frame::<FromWorker>(&mut buf).expect("decode") {
                        got.push(m);
                    }
                }
                prop_assert_eq!(got, msgs);
                prop_assert!(buf.is_empty());
                let start = ToWorker::Start { t0: MonoNanos(t0) };
                let mut one = Vec::new();
                encode_frame(&start, &mut one).expect("encode");
                let mut buf = BytesMut::from(&one[..]);
                prop_assert_eq!(decode_frame::<ToWorker>(&mut buf).expect("decode"), Some(start));
            }
        }
    }

    #[test]
    fn a_corrupt_body_is_an_error_and_is_consumed() {
        let mut buf = BytesMut::from(&[0, 0, 0, 1, 0xc1][..]);
        assert!(matches!(
            decode_frame::<Ping>(&mut buf),
            Err(FrameError::Decode(_))
        ));
        assert!(buf.is_empty());
    }
}

/// Reads frames from an async byte stream.
#[derive(Debug)]
pub struct FrameReader<R> {
    inner: R,
    buf: BytesMut,
}

impl<R: tokio::io::AsyncRead + Unpin> FrameReader<R> {
    /// Wraps a stream.
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            buf: BytesMut::with_capacity(64 << 10),
        }
    }

    /// The next message, or `None` at a clean end of stream.
    pub async fn next<T: DeserializeOwned>(&mut self) -> Result<Option<T>, FrameIoError> {
        use tokio::io::AsyncReadExt;
        loop {
            if let Some(msg) = decode_frame(&mut self.buf)? {
                return Ok(Some(msg));
            }
            if self.inner.read_buf(&mut self.buf).await? == 0 {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(FrameIoError::Truncated)
                };
            }
        }
    }
}

/// Writes frames to an async byte stream.
#[derive(Debug)]
pub struct FrameWriter<W> {
    inner: W,
    buf: Vec<u8>,
}

impl<W: tokio::io::AsyncWrite + Unpin> FrameWriter<W> {
    /// Wraps a stream.
    pub fn new(inner: W) -> Self {
        Self {
            inner,
            buf: Vec::with_capacity(64 << 10),
        }
    }

    /// Encodes and writes one message.
    pub async fn send<T: Serialize + ?Sized>(&mut self, msg: &T) -> Result<(), FrameIoError> {
        use tokio::io::AsyncWriteExt;
        self.buf.clear();
        encode_frame(msg, &mut self.buf)?;
        self.inner.write_all(&self.buf).await?;
        // Keep a burst's worth of capacity, not the largest frame ever sent.
        if self.buf.capacity() > 4 << 20 {
            self.buf = Vec::with_capacity(64 << 10);
        }
        Ok(())
    }
}

/// Errors of [`FrameReader`] and [`FrameWriter`].
#[derive(Debug, thiserror::Error)]
pub enum FrameIoError {
    /// The frame itself was bad.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The socket failed.
    #[error("IPC socket: {0}")]
    Io(#[from] std::io::Error),
    /// The peer closed the stream in the middle of a frame.
    #[error("IPC stream ended in the middle of a frame")]
    Truncated,
}

#[cfg(test)]
mod io_tests {
    use super::*;

    #[test]
    fn reader_and_writer_round_trip_and_detect_truncation() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let (a, b) = tokio::io::duplex(64);
            let mut w = FrameWriter::new(a);
            let mut r = FrameReader::new(b);
            let writer = async move {
                for i in 0..100u32 {
                    w.send(&i).await.expect("send");
                }
            };
            let reader = async move {
                let mut got = Vec::new();
                while let Some(v) = r.next::<u32>().await.expect("next") {
                    got.push(v);
                }
                got
            };
            let ((), got) = tokio::join!(writer, reader);
            assert_eq!(got, (0..100).collect::<Vec<_>>());

            let mut cut = FrameReader::new(&[0u8, 0, 0, 5, 1][..]);
            assert!(matches!(
                cut.next::<u32>().await,
                Err(FrameIoError::Truncated)
            ));
        });
    }
}

/// The messages' wire format, pinned with the codec: the messages do not use the codec,
/// so their own tests do not reach into it (no import loop between the two modules).
#[cfg(test)]
mod message_wire_tests {
    use super::{decode_frame, encode_frame};
    use crate::clock::MonoNanos;
    use crate::messages::{FromWorker, PROTOCOL_VERSION, ToWorker};

    /// Golden bytes of a control message: enum variant and field names are on the wire.
    #[test]
    fn hello_wire_format_is_pinned() {
        let mut out = Vec::new();
        encode_frame(
            &FromWorker::Hello {
                protocol_version: PROTOCOL_VERSION,
                pid: 5,
            },
            &mut out,
        )
        .expect("encode");
        let mut expected = vec![0, 0, 0, 31, 0x81, 0xa5];
        expected.extend_from_slice(b"hello");
        expected.extend_from_slice(&[0x82, 0xb0]);
        expected.extend_from_slice(b"protocol_version");
        expected.push(0x03);
        expected.extend_from_slice(&[0xa3]);
        expected.extend_from_slice(b"pid");
        expected.push(0x05);
        assert_eq!(out, expected);
        assert_eq!(PROTOCOL_VERSION, 3);
    }

    #[test]
    fn unit_variants_are_plain_strings() {
        let mut out = Vec::new();
        encode_frame(&FromWorker::Ready, &mut out).expect("encode");
        assert_eq!(&out[4..], b"\xa5ready");
    }

    #[test]
    fn messages_round_trip() {
        let msgs = vec![ToWorker::Start { t0: MonoNanos(123) }];
        let mut wire = Vec::new();
        for m in &msgs {
            encode_frame(m, &mut wire).expect("encode");
        }
        let mut buf = bytes::BytesMut::from(&wire[..]);
        let mut back = Vec::new();
        while let Some(m) = decode_frame::<ToWorker>(&mut buf).expect("decode") {
            back.push(m);
        }
        assert_eq!(back, msgs);
    }
}
