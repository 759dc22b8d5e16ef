//! Synthetic images and audio for multimodal requests.
//!
//! Every medium is generated from the seed once, when the source is built (before any
//! slot is due, so encoding never adds dispatch lag), and shared by reference between
//! the requests that carry it: a run of 4 images of 1024×1024 encodes 4 images, not 4
//! per request. Images are smooth gradients with a little seeded noise, so a JPEG of them
//! is about as large as a photo of that size (a flat image would compress to nothing,
//! pure noise to far more than a photo); audio is 16 kHz mono 16-bit PCM WAV (Whisper's
//! own rate) of two tones and noise.
//!
//! Identical images across requests may hit a server's multimodal cache (vLLM hashes
//! each image and reuses its encoder output); `image_pool=N` generates N distinct images
//! and cycles through them instead.

use base64::Engine;
use bytes::Bytes;
use llmsurge_proto::seed::derive_seed;
use llmsurge_proto::{ImageFormat, MediaSpec};
use llmsurge_worker::MediaPart;
use std::sync::Arc;

/// Sample rate of generated audio.
pub const AUDIO_RATE: u32 = 16_000;

/// The media of a spec, generated once.
#[derive(Debug, Default)]
pub struct MediaSet {
    images_per_request: u32,
    pool: Vec<MediaPart>,
    audio: Option<MediaPart>,
}

impl MediaSet {
    /// Generates the image pool and the audio clip of `spec`.
    pub fn generate(spec: &MediaSpec, seed: u64) -> Result<Self, String> {
        let n = if spec.images == 0 {
            0
        } else {
            spec.image_pool.max(spec.images)
        };
        let pool = (0..u64::from(n))
            .map(|i| {
                let bytes = encode_image(
                    spec.image_width,
                    spec.image_height,
                    spec.image_format,
                    derive_seed(seed, "image", i),
                )?;
                Ok(image_part(
                    &bytes,
                    spec.image_format.mime(),
                    spec.image_width,
                    spec.image_height,
                ))
            })
            .collect::<Result<Vec<_>, String>>()?;
        let audio = (spec.audio_seconds > 0.0)
            .then(|| audio_part(spec.audio_seconds, derive_seed(seed, "audio", 0)));
        Ok(Self {
            images_per_request: spec.images,
            pool,
            audio,
        })
    }

    /// Whether there are no media.
    pub fn is_empty(&self) -> bool {
        self.pool.is_empty() && self.audio.is_none()
    }

    /// The media of sample `sample`: its images from the pool, then the audio.
    pub fn parts(&self, sample: u64) -> Vec<MediaPart> {
        let per = u64::from(self.images_per_request);
        let mut parts = Vec::with_capacity(per as usize + 1);
        if !self.pool.is_empty() {
            let len = self.pool.len() as u64;
            for i in 0..per {
                let k = sample.wrapping_mul(per).wrapping_add(i) % len;
                parts.push(self.pool[k as usize].clone());
            }
        }
        parts.extend(self.audio.clone());
        parts
    }
}

/// The media of a spec for the report: sizes, never bytes.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct MediaSummary {
    /// Images per request.
    #[serde(skip_serializing_if = "is_zero")]
    pub images: u32,
    /// `WIDTHxHEIGHT`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_size: Option<String>,
    /// `jpeg` or `png`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_format: Option<ImageFormat>,
    /// Distinct images cycled through.
    #[serde(skip_serializing_if = "is_zero")]
    pub image_pool: u32,
    /// Encoded bytes of one image (the first of the pool; the others are within a few
    /// percent), before base64.
    #[serde(skip_serializing_if = "is_zero64")]
    pub image_bytes: u64,
    /// Seconds of audio per request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audio_seconds: Option<f64>,
    /// Bytes of the WAV clip.
    #[serde(skip_serializing_if = "is_zero64")]
    pub audio_bytes: u64,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_zero64(n: &u64) -> bool {
    *n == 0
}

impl MediaSummary {
    /// Measures the media of `spec` (one image and the clip, generated once more here:
    /// the coordinator never holds the whole pool); `None` without media.
    pub fn of(spec: &MediaSpec, seed: u64) -> Result<Option<Self>, String> {
        if !spec.any() {
            return Ok(None);
        }
        let image_bytes = if spec.images > 0 {
            encode_image(
                spec.image_width,
                spec.image_height,
                spec.image_format,
                derive_seed(seed, "image", 0),
            )?
            .len() as u64
        } else {
            0
        };
        let audio = spec.audio_seconds > 0.0;
        let has_images = spec.images > 0;
        Ok(Some(Self {
            images: spec.images,
            image_size: has_images.then(|| format!("{}x{}", spec.image_width, spec.image_height)),
            image_format: has_images.then_some(spec.image_format),
            image_pool: if has_images {
                spec.image_pool.max(spec.images)
            } else {
                0
            },
            image_bytes,
            audio_seconds: audio.then_some(spec.audio_seconds),
            audio_bytes: if audio {
                44 + 2 * (spec.audio_seconds * f64::from(AUDIO_RATE)).round() as u64
            } else {
                0
            },
        }))
    }
}

/// An `image_url` part of encoded image bytes, as a data URL.
pub fn image_part(bytes: &[u8], mime: &str, width: u32, height: u32) -> MediaPart {
    let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
    let mut url = String::with_capacity(b64.len() + 32);
    url.push_str("data:");
    url.push_str(mime);
    url.push_str(";base64,");
    url.push_str(&b64);
    MediaPart::Image {
        url: Arc::from(url),
        width,
        height,
        bytes: bytes.len() as u64,
    }
}

/// An audio part of `seconds` of generated WAV.
pub fn audio_part(seconds: f64, seed: u64) -> MediaPart {
    let wav = wav(seconds, seed);
    let base64 = base64::engine::general_purpose::STANDARD.encode(&wav);
    MediaPart::Audio {
        wav: Bytes::from(wav),
        base64: Arc::from(base64),
        seconds,
    }
}

/// A small fast generator for pixel and sample noise (xorshift64*).
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// RGB pixels of a seeded gradient with noise.
fn pixels(width: u32, height: u32, seed: u64) -> Vec<u8> {
    let (w, h) = (width as usize, height as usize);
    let mut noise = Noise(seed | 1);
    // Per-image gradient directions and offsets, so pool images differ everywhere.
    let k = |shift: u32| ((seed >> shift) & 0xff) as usize + 64;
    let (kr, kg, kb) = (k(0), k(8), k(16));
    let mut out = Vec::with_capacity(w * h * 3);
    for y in 0..h {
        for x in 0..w {
            let n = noise.next();
            let jitter = |i: u32| ((n >> (i * 8)) & 0x1f) as usize;
            out.push(((x * kr / w.max(1) + y + jitter(0)) & 0xff) as u8);
            out.push(((y * kg / h.max(1) + x / 2 + jitter(1)) & 0xff) as u8);
            out.push((((x + y) * kb / (w + h).max(1) + jitter(2)) & 0xff) as u8);
        }
    }
    out
}

/// Encodes a generated image.
pub fn encode_image(
    width: u32,
    height: u32,
    format: ImageFormat,
    seed: u64,
) -> Result<Vec<u8>, String> {
    let rgb = pixels(width, height, seed);
    let mut out = Vec::with_capacity(rgb.len() / 4);
    match format {
        ImageFormat::Png => {
            let mut enc = png::Encoder::new(&mut out, width, height);
            enc.set_color(png::ColorType::Rgb);
            enc.set_depth(png::BitDepth::Eight);
            let mut writer = enc
                .write_header()
                .map_err(|e| format!("PNG encoding: {e}"))?;
            writer
                .write_image_data(&rgb)
                .map_err(|e| format!("PNG encoding: {e}"))?;
            writer.finish().map_err(|e| format!("PNG encoding: {e}"))?;
        }
        ImageFormat::Jpeg => {
            let (w, h) = (
                u16::try_from(width).map_err(|_| "JPEG images are at most 65535 wide")?,
                u16::try_from(height).map_err(|_| "JPEG images are at most 65535 high")?,
            );
            jpeg_encoder::Encoder::new(&mut out, 85)
                .encode(&rgb, w, h, jpeg_encoder::ColorType::Rgb)
                .map_err(|e| format!("JPEG encoding: {e}"))?;
        }
    }
    Ok(out)
}

/// A 16 kHz mono 16-bit PCM WAV of `seconds`: two seeded tones under a little noise.
pub fn wav(seconds: f64, seed: u64) -> Vec<u8> {
    let samples = (seconds * f64::from(AUDIO_RATE)).round().max(0.0) as u32;
    let data_len = samples * 2;
    let mut out = Vec::with_capacity(44 + data_len as usize);
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&(36 + data_len).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&16u32.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes()); // PCM
    out.extend_from_slice(&1u16.to_le_bytes()); // mono
    out.extend_from_slice(&AUDIO_RATE.to_le_bytes());
    out.extend_from_slice(&(AUDIO_RATE * 2).to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&16u16.to_le_bytes());
    out.extend_from_slice(b"data");
    out.extend_from_slice(&data_len.to_le_bytes());
    let mut noise = Noise(seed | 1);
    let f1 = 180.0 + (seed % 200) as f64;
    let f2 = 600.0 + ((seed >> 8) % 400) as f64;
    let step = std::f64::consts::TAU / f64::from(AUDIO_RATE);
    for i in 0..samples {
        let t = f64::from(i) * step;
        let v = 6000.0 * (t * f1).sin() + 3000.0 * (t * f2).sin();
        let n = (noise.next() >> 54) as f64 - 512.0;
        out.extend_from_slice(&((v + n) as i16).to_le_bytes());
    }
    out
}

/// Parses `WxH` (e.g. `512x512`).
pub fn parse_size(raw: &str) -> Result<(u32, u32), String> {
    let bad = || format!("image_size={raw}: expected WIDTHxHEIGHT, e.g. 512x512");
    let (w, h) = raw.trim().split_once(['x', 'X']).ok_or_else(bad)?;
    let (w, h): (u32, u32) = (
        w.trim().parse().map_err(|_| bad())?,
        h.trim().parse().map_err(|_| bad())?,
    );
    if w == 0 || h == 0 || w > 8192 || h > 8192 {
        return Err(format!(
            "image_size={raw}: each side must be 1 to 8192 pixels"
        ));
    }
    Ok((w, h))
}

/// The pixel size of an encoded PNG, JPEG, GIF or WebP image, read from its header;
/// `None` for anything else or a truncated header. For the request log of dataset
/// images, whose sizes the file names do not say.
pub fn image_dimensions(b: &[u8]) -> Option<(u32, u32)> {
    let be16 = |i: usize| Some(u32::from(u16::from_be_bytes([*b.get(i)?, *b.get(i + 1)?])));
    let le16 = |i: usize| Some(u32::from(u16::from_le_bytes([*b.get(i)?, *b.get(i + 1)?])));
    let le24 = |i: usize| {
        Some(u32::from_le_bytes([
            *b.get(i)?,
            *b.get(i + 1)?,
            *b.get(i + 2)?,
            0,
        ]))
    };
    if b.starts_with(b"\x89PNG\r\n\x1a\n") {
        let w = b.get(16..20)?;
        let h = b.get(20..24)?;
        return Some((
            u32::from_be_bytes(w.try_into().ok()?),
            u32::from_be_bytes(h.try_into().ok()?),
        ));
    }
    if b.starts_with(b"GIF87a") || b.starts_with(b"GIF89a") {
        return Some((le16(6)?, le16(8)?));
    }
    if b.starts_with(b"RIFF") && b.get(8..12) == Some(b"WEBP") {
        return match b.get(12..16)? {
            b"VP8 " => Some((le16(26)? & 0x3fff, le16(28)? & 0x3fff)),
            b"VP8L" => {
                let bits = u32::from_le_bytes(b.get(21..25)?.try_into().ok()?);
                Some(((bits & 0x3fff) + 1, ((bits >> 14) & 0x3fff) + 1))
            }
            b"VP8X" => Some((le24(24)? + 1, le24(27)? + 1)),
            _ => None,
        };
    }
    if b.starts_with(b"\xff\xd8") {
        // Walk the segments to the first start-of-frame marker (SOF0..SOF15 but the
        // DHT, JPG and DAC markers C4, C8, CC), which holds height then width.
        let mut i = 2;
        loop {
            while *b.get(i)? != 0xff {
                i += 1;
            }
            while *b.get(i)? == 0xff {
                i += 1;
            }
            let marker = *b.get(i)?;
            i += 1;
            if matches!(marker, 0xd0..=0xd9 | 0x01) {
                continue; // markers without a length
            }
            if (0xc0..=0xcf).contains(&marker) && !matches!(marker, 0xc4 | 0xc8 | 0xcc) {
                return Some((be16(i + 5)?, be16(i + 3)?));
            }
            i += usize::try_from(be16(i)?).ok()?;
        }
    }
    None
}

/// The MIME type of an image file, from its extension.
pub fn mime_of(path: &std::path::Path) -> Option<&'static str> {
    match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
        "png" => Some("image/png"),
        "jpg" | "jpeg" => Some("image/jpeg"),
        "webp" => Some("image/webp"),
        "gif" => Some("image/gif"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_media_are_deterministic_and_well_formed() {
        let png = encode_image(32, 16, ImageFormat::Png, 7).expect("png");
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        assert_eq!(u32::from_be_bytes([png[16], png[17], png[18], png[19]]), 32);
        assert_eq!(u32::from_be_bytes([png[20], png[21], png[22], png[23]]), 16);
        assert_eq!(png, encode_image(32, 16, ImageFormat::Png, 7).expect("png"));
        assert_ne!(png, encode_image(32, 16, ImageFormat::Png, 8).expect("png"));
        let jpg = encode_image(64, 48, ImageFormat::Jpeg, 7).expect("jpeg");
        assert_eq!(&jpg[..2], b"\xff\xd8");
        let w = wav(0.5, 3);
        assert_eq!(&w[..4], b"RIFF");
        assert_eq!(w.len(), 44 + 8000 * 2);
        assert_eq!(parse_size("512x256"), Ok((512, 256)));
        assert_eq!(image_dimensions(&png), Some((32, 16)));
        assert_eq!(image_dimensions(&jpg), Some((64, 48)));
        assert_eq!(image_dimensions(&png[..20]), None, "a truncated header");
        assert_eq!(image_dimensions(b"GIF89a\x05\x00\x07\x00"), Some((5, 7)));
        assert!(parse_size("512").is_err() && parse_size("0x5").is_err());
    }

    #[test]
    fn a_media_set_shares_its_pool_between_requests() {
        let spec = MediaSpec {
            images: 2,
            image_width: 8,
            image_height: 8,
            image_format: ImageFormat::Png,
            image_pool: 3,
            audio_seconds: 0.25,
        };
        let set = MediaSet::generate(&spec, 1).expect("set");
        let a = set.parts(0);
        assert_eq!(a.len(), 3, "two images and the audio");
        let url = |p: &MediaPart| match p {
            MediaPart::Image { url, .. } => Arc::clone(url),
            MediaPart::Audio { .. } => Arc::from(""),
        };
        // Pool of 3 cycled two at a time: sample 1 starts at the third image.
        assert!(!Arc::ptr_eq(&url(&set.parts(1)[0]), &url(&set.parts(0)[0])));
        assert!(Arc::ptr_eq(&url(&set.parts(3)[0]), &url(&set.parts(0)[0])));
        assert!(url(&a[0]).starts_with("data:image/png;base64,iVBORw0KGgo"));
    }
}
