//! Images and audio in requests: their sizes, read from the headers alone, and the
//! prompt tokens they cost.
//!
//! The cost follows vLLM's accounting for the common models: an image costs one token
//! per 28×28 pixels (Qwen2-VL and Qwen2.5-VL: 14-pixel patches merged 2×2), rounded up
//! per side; an image given by a URL the mock does not fetch counts as 512×512. Audio
//! costs 25 tokens per second (Whisper's encoder frames pooled by 2, as Qwen2-Audio
//! does). The media tokens enter the prefix-cache model named by the image or audio
//! content, so identical images hit, as vLLM's multimodal hashes make them.

use base64::Engine;
use std::hash::{DefaultHasher, Hash, Hasher};

use super::shared::{Content, Message};
use crate::mock::model::prefix_cache::PromptBlocks;

/// The prompt of chat messages: the tokens of every text content, and those of every
/// image and audio part (see below), which are counted too.
pub fn message_blocks(messages: &[Message]) -> (PromptBlocks, MediaCount) {
    let mut blocks = PromptBlocks::default();
    let mut media = MediaCount::default();
    for m in messages {
        match &m.content {
            Some(Content::Text(t)) => blocks.push_text(t),
            // Part by part, so a prompt's blocks keep the order of its text and media.
            Some(Content::Parts(parts)) => {
                for p in parts {
                    p.for_each_text(&mut |t| blocks.push_text(t));
                    if let Some(image) = &p.image_url {
                        media.image(&image.url, &mut blocks);
                    }
                    if let Some(audio) = &p.input_audio {
                        media.audio_base64(&audio.data, &mut blocks);
                    }
                }
            }
            None => {}
        }
        m.for_each_tool_text(|t| blocks.push_text(t));
    }
    (blocks, media)
}

/// Pixels per image token along each side.
pub const IMAGE_PATCH: u32 = 28;
/// Prompt tokens per second of audio.
pub const AUDIO_TOKENS_PER_S: u64 = 25;
/// The size assumed for an image URL that is not a data URL.
pub const UNFETCHED_IMAGE: (u32, u32) = (512, 512);

/// The images and audio of one request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MediaCount {
    /// Images.
    pub images: u64,
    /// Milliseconds of audio.
    pub audio_ms: u64,
    /// Prompt tokens they cost.
    pub tokens: u64,
}

/// Decodes the first bytes of a base64 text (enough for a file header).
fn head(b64: &str, bytes: usize) -> Vec<u8> {
    let chars = (bytes.div_ceil(3) * 4).min(b64.len() / 4 * 4);
    base64::engine::general_purpose::STANDARD
        .decode(&b64.as_bytes()[..chars])
        .unwrap_or_default()
}

/// The size of a PNG or JPEG from its first bytes.
pub fn image_size(data: &[u8]) -> Option<(u32, u32)> {
    if data.starts_with(b"\x89PNG\r\n\x1a\n") && data.len() >= 24 {
        let be = |i: usize| u32::from_be_bytes([data[i], data[i + 1], data[i + 2], data[i + 3]]);
        return Some((be(16), be(20)));
    }
    if !data.starts_with(b"\xff\xd8") {
        return None;
    }
    // JPEG: walk the segments to the first start-of-frame marker.
    let mut i = 2;
    while i + 9 < data.len() {
        if data[i] != 0xff {
            return None;
        }
        let marker = data[i + 1];
        let len = usize::from(u16::from_be_bytes([data[i + 2], data[i + 3]]));
        if matches!(marker, 0xc0..=0xcf) && !matches!(marker, 0xc4 | 0xc8 | 0xcc) {
            let h = u32::from(u16::from_be_bytes([data[i + 5], data[i + 6]]));
            let w = u32::from(u16::from_be_bytes([data[i + 7], data[i + 8]]));
            return Some((w, h));
        }
        i += 2 + len;
    }
    None
}

/// Milliseconds of a PCM WAV from its header (`fmt ` byte rate, `data` size).
pub fn wav_ms(data: &[u8]) -> Option<u64> {
    if !(data.starts_with(b"RIFF") && data.get(8..12) == Some(b"WAVE")) {
        return None;
    }
    let mut i = 12;
    let mut byte_rate = None;
    while i + 8 <= data.len() {
        let id = &data[i..i + 4];
        let len = u32::from_le_bytes([data[i + 4], data[i + 5], data[i + 6], data[i + 7]]);
        if id == b"fmt " && i + 16 <= data.len() {
            byte_rate = Some(u32::from_le_bytes([
                data[i + 16],
                data[i + 17],
                data[i + 18],
                data[i + 19],
            ]));
        } else if id == b"data" {
            let rate = u64::from(byte_rate.filter(|&r| r > 0)?);
            return Some(u64::from(len) * 1000 / rate);
        }
        i += 8 + len as usize + (len as usize & 1);
    }
    None
}

/// A name for a medium's content: its length and its first and last 8 KiB. Hashing
/// megabytes per request would cost the mock more than the rest of the request; two
/// encoded images that agree there and in length are, in practice, the same image.
fn content_hash(s: &[u8]) -> u64 {
    const EDGE: usize = 8 << 10;
    let mut h = DefaultHasher::new();
    s.len().hash(&mut h);
    if s.len() <= 2 * EDGE {
        s.hash(&mut h);
    } else {
        s[..EDGE].hash(&mut h);
        s[s.len() - EDGE..].hash(&mut h);
    }
    h.finish()
}

/// Adds `tokens` tokens named by the medium's content `key` (equal media, equal tokens).
pub fn push_media_tokens(blocks: &mut PromptBlocks, key: &[u8], tokens: u64) {
    let name = content_hash(key).to_le_bytes();
    for i in 0..tokens {
        let mut t = [0u8; 16];
        t[..8].copy_from_slice(&name);
        t[8..].copy_from_slice(&i.to_le_bytes());
        blocks.push(&t);
    }
}

impl MediaCount {
    /// Counts an `image_url` part and adds its tokens to `blocks`.
    pub fn image(&mut self, url: &str, blocks: &mut PromptBlocks) {
        let size = url
            .strip_prefix("data:")
            .and_then(|rest| rest.split_once(";base64,"))
            .and_then(|(_, b64)| image_size(&head(b64, 4096)))
            .unwrap_or(UNFETCHED_IMAGE);
        let tokens =
            u64::from(size.0.div_ceil(IMAGE_PATCH)) * u64::from(size.1.div_ceil(IMAGE_PATCH));
        self.images += 1;
        self.tokens += tokens;
        push_media_tokens(blocks, url.as_bytes(), tokens);
    }

    /// Counts an `input_audio` part (base64 WAV) and adds its tokens to `blocks`.
    pub fn audio_base64(&mut self, b64: &str, blocks: &mut PromptBlocks) {
        let ms = wav_ms(&head(b64, 256)).unwrap_or(0);
        let tokens = self.audio(ms);
        push_media_tokens(blocks, b64.as_bytes(), tokens);
    }

    /// Counts `ms` of audio; returns its tokens.
    pub fn audio(&mut self, ms: u64) -> u64 {
        let tokens = (ms * AUDIO_TOKENS_PER_S).div_ceil(1000);
        self.audio_ms += ms;
        self.tokens += tokens;
        tokens
    }
}

/// One part of a `multipart/form-data` body.
#[derive(Debug, PartialEq, Eq)]
pub struct FormPart<'a> {
    /// The `name` of its `Content-Disposition`.
    pub name: &'a str,
    /// Its bytes.
    pub data: &'a [u8],
}

/// The boundary of a `multipart/form-data` content type.
pub fn boundary(content_type: &str) -> Option<&str> {
    let (kind, params) = content_type.split_once(';')?;
    if !kind.trim().eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    params.split(';').find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| v.trim().trim_matches('"'))
    })
}

/// Splits a `multipart/form-data` body (RFC 7578) into its parts; a body that does not
/// follow the format is an error naming what is wrong.
pub fn parse_form<'a>(body: &'a [u8], boundary: &str) -> Result<Vec<FormPart<'a>>, String> {
    let delim = format!("--{boundary}");
    let delim = delim.as_bytes();
    let find = |from: usize, needle: &[u8]| -> Option<usize> {
        memchr::memmem::find(&body[from..], needle).map(|i| from + i)
    };
    let mut at = find(0, delim).ok_or("multipart body without its boundary")? + delim.len();
    let mut parts = Vec::new();
    loop {
        if body[at..].starts_with(b"--") {
            return Ok(parts);
        }
        if !body[at..].starts_with(b"\r\n") {
            return Err("multipart boundary not followed by CRLF".into());
        }
        at += 2;
        let headers_end =
            find(at, b"\r\n\r\n").ok_or("multipart part without a blank line after its headers")?;
        let headers = std::str::from_utf8(&body[at..headers_end])
            .map_err(|_| "multipart headers are not UTF-8")?;
        let name = headers
            .split("\r\n")
            .filter(|h| {
                h.split_once(':')
                    .is_some_and(|(k, _)| k.trim().eq_ignore_ascii_case("content-disposition"))
            })
            .find_map(|h| {
                h.split(';').find_map(|p| {
                    let (k, v) = p.split_once('=')?;
                    (k.trim() == "name").then(|| v.trim().trim_matches('"'))
                })
            })
            .ok_or("multipart part without a Content-Disposition name")?;
        let data_start = headers_end + 4;
        let mut close = Vec::with_capacity(delim.len() + 2);
        close.extend_from_slice(b"\r\n");
        close.extend_from_slice(delim);
        let data_end =
            find(data_start, &close).ok_or("multipart part without a closing boundary")?;
        parts.push(FormPart {
            name,
            data: &body[data_start..data_end],
        });
        at = data_end + close.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resent_tool_call_and_its_result_count_as_prompt() {
        let chat: Vec<Message> = serde_json::from_str(
            r#"[{"role": "user", "content": "look it up"},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1",
                 "type": "function", "function": {"name": "tool_0", "arguments": "{\"query\":\"x y\"}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "found three things"}]"#,
        )
        .expect("chat messages");
        let anthropic: Vec<Message> = serde_json::from_str(
            r#"[{"role": "user", "content": "look it up"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1",
                 "name": "tool_0", "input": {"query": "x y"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                 "content": "found three things"}]}]"#,
        )
        .expect("anthropic messages");
        // "look it up" 3, `{"query":"x y"}` 10 (punctuation is a token each), "found
        // three things" 3.
        for messages in [&chat, &anthropic] {
            assert_eq!(message_blocks(messages).0.tokens(), 16, "{messages:?}");
        }
    }

    #[test]
    fn mock_reads_media_headers() {
        let png = crate::data::media::encode_image(56, 29, llmsurge_proto::ImageFormat::Png, 1)
            .expect("png");
        assert_eq!(image_size(&png), Some((56, 29)));
        let jpg = crate::data::media::encode_image(100, 60, llmsurge_proto::ImageFormat::Jpeg, 1)
            .expect("jpeg");
        assert_eq!(image_size(&jpg), Some((100, 60)));
        assert_eq!(wav_ms(&crate::data::media::wav(2.5, 1)), Some(2500));
        assert_eq!(wav_ms(b"RIFF0000WAVE"), None);
        let mut count = MediaCount::default();
        let mut blocks = PromptBlocks::default();
        let b64 = base64::engine::general_purpose::STANDARD.encode(&png);
        count.image(&format!("data:image/png;base64,{b64}"), &mut blocks);
        // 56×29 is 2×2 patches of 28.
        assert_eq!((count.images, count.tokens, blocks.tokens()), (1, 4, 4));
        count.image("https://example.com/cat.jpg", &mut blocks);
        assert_eq!(count.tokens, 4 + 19 * 19);
    }

    #[test]
    fn mock_parses_the_multipart_form_it_is_sent() {
        assert_eq!(boundary("multipart/form-data; boundary=abc"), Some("abc"));
        assert_eq!(
            boundary("multipart/form-data; boundary=\"a b\""),
            Some("a b")
        );
        assert_eq!(boundary("application/json"), None);
        let body = b"--xy\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\nContent-Type: audio/wav\r\n\r\nRI\r\nFF\r\n--xy\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm\r\n--xy--\r\n";
        let parts = parse_form(body, "xy").expect("form");
        assert_eq!(
            parts,
            vec![
                FormPart {
                    name: "file",
                    data: b"RI\r\nFF"
                },
                FormPart {
                    name: "model",
                    data: b"m"
                },
            ]
        );
        assert!(
            parse_form(
                b"--xy\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nno end",
                "xy"
            )
            .is_err()
        );
        assert!(parse_form(b"nothing", "xy").is_err());
        assert!(parse_form(b"--xy\r\nX: y\r\n\r\nv\r\n--xy--", "xy").is_err());
    }
}
