//! Files built into the binary LZMA-compressed, to keep the shipped binary small: the
//! tiktoken vocabularies (`data::encodings`), and the vendored chart script and font of
//! the reports (`assets/uplot`, `assets/fonts`, kept beside their packed copies so they
//! can be read and diffed). The test here checks each packed vendored file against its
//! source and rewrites it with `LLMSURGE_WRITE_MATERIAL=1`.

use std::io::Read;
use std::sync::LazyLock;

/// A packed file's bytes: its `.lzma` stream decompressed.
pub fn unpack(packed: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut raw = Vec::new();
    lzma_rust2::LzmaReader::new_mem_limit(packed, u32::MAX, None)?.read_to_end(&mut raw)?;
    Ok(raw)
}

const UPLOT_JS: &[u8] = include_bytes!("../assets/uplot/uPlot.iife.min.js.lzma");
const CHART_FONT: &[u8] = include_bytes!("../assets/fonts/ChartSans-Regular.ttf.lzma");

/// uPlot's script (`assets/uplot/uPlot.iife.min.js`), unpacked on first use.
pub fn uplot_js() -> &'static str {
    static TEXT: LazyLock<String> = LazyLock::new(|| text(UPLOT_JS));
    &TEXT
}

/// The charts' font (`assets/fonts/ChartSans-Regular.ttf`), unpacked on first use.
pub fn chart_font() -> &'static [u8] {
    static BYTES: LazyLock<Vec<u8>> = LazyLock::new(|| unpack(CHART_FONT).unwrap_or_default());
    &BYTES
}

/// A packed text; empty if it does not unpack, which the test below rules out for every
/// file built in.
fn text(packed: &[u8]) -> String {
    unpack(packed)
        .ok()
        .and_then(|raw| String::from_utf8(raw).ok())
        .unwrap_or_default()
}

/// Packs `raw` as the files here are packed (tests only: the binary carries the decoder).
#[cfg(test)]
pub fn pack(raw: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut options = lzma_rust2::LzmaOptions::with_preset(9);
    // Vocabularies, script and font have no alignment: position bits only cost.
    options.pb = 0;
    let size = u64::try_from(raw.len()).expect("size");
    let mut w =
        lzma_rust2::LzmaWriter::new_use_header(Vec::new(), &options, Some(size)).expect("encoder");
    w.write_all(raw).expect("compress");
    w.finish().expect("compress")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each vendored file and its packed copy hold the same bytes; with
    /// `LLMSURGE_WRITE_MATERIAL=1` the packed copies are rewritten from the sources.
    #[test]
    fn vendored_files_are_packed_from_their_sources() {
        let files = [
            ("assets/uplot/uPlot.iife.min.js", UPLOT_JS),
            ("assets/fonts/ChartSans-Regular.ttf", CHART_FONT),
        ];
        let root = env!("CARGO_MANIFEST_DIR");
        let read =
            |source: &str| std::fs::read(format!("{root}/{source}")).expect("the vendored file");
        if std::env::var_os("LLMSURGE_WRITE_MATERIAL").is_some() {
            for (source, _) in files {
                std::fs::write(format!("{root}/{source}.lzma"), pack(&read(source)))
                    .expect("write");
            }
        }
        for (source, packed) in files {
            assert!(
                unpack(packed).ok() == Some(read(source)),
                "{source}.lzma is out of date: rerun this test with LLMSURGE_WRITE_MATERIAL=1"
            );
        }
        // And what the reports use is what they unpack to.
        assert_eq!(
            Some(uplot_js().as_bytes()),
            unpack(UPLOT_JS).ok().as_deref()
        );
        assert_eq!(Some(chart_font()), unpack(CHART_FONT).ok().as_deref());
    }
}
