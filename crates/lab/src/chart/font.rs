//! A TrueType font for the PNG's text, found at run time.
//!
//! plotters' `ab_glyph` feature rasterises glyphs in pure Rust but ships no
//! font and does not look for one (its `ttf` feature would, through
//! fontconfig and freetype system libraries). So we look ourselves, without
//! fontconfig: `$NVMFS_CHART_FONT`, then the usual paths of DejaVu Sans and a
//! few similar fonts, then any .ttf/.otf under the usual font directories.
//! The first file ab_glyph accepts is registered once per process under the
//! "sans-serif" family that draw.rs uses.

use super::ChartError;
use plotters::style::{register_font, FontFamily, FontStyle};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Environment variable naming a .ttf/.otf file to use for PNG text, tried
/// before any other.
pub const FONT_ENV: &str = "NVMFS_CHART_FONT";

/// Regular sans-serif faces at their usual paths (Debian/Ubuntu, Fedora,
/// Arch, macOS), best first.
const KNOWN_FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
    "/Library/Fonts/Arial.ttf",
];

/// Directories searched (recursively) when no known font exists.
const FONT_DIRS: &[&str] = &[
    "/usr/share/fonts",
    "/usr/local/share/fonts",
    "/Library/Fonts",
    "/System/Library/Fonts",
];

/// Bounds on the directory search, so a huge or looping tree cannot stall
/// a benchmark report.
const MAX_DEPTH: usize = 6;
const MAX_ENTRIES: usize = 20_000;
/// Font files larger than this are skipped (CJK collections run to tens of
/// MiB and are not what a chart needs).
const MAX_FONT_BYTES: u64 = 32 << 20;

/// The registered font's path, or why there is none; decided once.
static FONT: OnceLock<Result<PathBuf, String>> = OnceLock::new();

/// Makes sure a font is registered for PNG text, looking for one on the first
/// call; returns its path, or [`ChartError::NoFont`] saying where we looked
/// and which package provides one.
pub(super) fn ensure_registered() -> Result<&'static Path, ChartError> {
    match FONT.get_or_init(find_and_register) {
        Ok(path) => Ok(path),
        Err(why) => Err(ChartError::NoFont(why.clone())),
    }
}

fn find_and_register() -> Result<PathBuf, String> {
    let env = std::env::var_os(FONT_ENV).map(PathBuf::from);
    let known = KNOWN_FONTS.iter().map(PathBuf::from);
    let candidates = env.into_iter().chain(known).chain(search_font_dirs());
    for path in candidates {
        if register(&path) {
            return Ok(path);
        }
    }
    Err(no_font_message())
}

fn no_font_message() -> String {
    format!(
        "no usable TrueType font (looked at ${FONT_ENV}, DejaVu Sans and similar at their usual \
         paths, and *.ttf/*.otf under {}); install one, e.g. `apt-get install fonts-dejavu-core`, \
         or point {FONT_ENV} at a .ttf file",
        FONT_DIRS.join(", ")
    )
}

/// Reads and registers one font file; false if it is missing, too large or
/// not a font ab_glyph can parse.
fn register(path: &Path) -> bool {
    let small_file = fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() <= MAX_FONT_BYTES);
    let Some(bytes) = small_file.then(|| fs::read(path).ok()).flatten() else {
        return false;
    };
    // plotters keeps fonts for the whole process and wants `&'static` bytes:
    // leak them. This happens once per candidate tried, normally once.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    register_font(FontFamily::SansSerif.as_str(), FontStyle::Normal, bytes).is_ok()
}

/// Font files under [`FONT_DIRS`], most suitable first: regular sans faces,
/// then other regular faces, then the rest, each by path (so the choice
/// does not depend on directory order).
fn search_font_dirs() -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut budget = MAX_ENTRIES;
    for dir in FONT_DIRS {
        collect_fonts(Path::new(dir), MAX_DEPTH, &mut budget, &mut found);
    }
    found.sort_by_cached_key(|p| (rank(p), p.clone()));
    found
}

fn collect_fonts(dir: &Path, depth: usize, budget: &mut usize, found: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if *budget == 0 {
            return;
        }
        *budget -= 1;
        let path = entry.path();
        // file_type() does not follow symlinks, so linked directories cannot loop.
        match entry.file_type() {
            Ok(t) if t.is_dir() && depth > 0 => collect_fonts(&path, depth - 1, budget, found),
            Ok(_) if is_font_file(&path) => found.push(path),
            _ => {}
        }
    }
}

fn is_font_file(path: &Path) -> bool {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    ext.eq_ignore_ascii_case("ttf") || ext.eq_ignore_ascii_case("otf")
}

/// 0 for a regular sans-serif face, 1 for another regular face, 2 for
/// bold/italic/condensed/monospace/... variants.
fn rank(path: &Path) -> u8 {
    let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let name = name.to_ascii_lowercase();
    let variants = [
        "bold",
        "italic",
        "oblique",
        "mono",
        "condensed",
        "light",
        "math",
    ];
    if variants.iter().any(|v| name.contains(v)) {
        2
    } else if name.contains("sans") {
        0
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_prefers_regular_sans_faces() {
        let mut paths: Vec<PathBuf> = [
            "/f/DejaVuSans-Bold.ttf",
            "/f/DejaVuSerif.ttf",
            "/f/DejaVuSansMono.ttf",
            "/f/DejaVuSans.ttf",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        paths.sort_by_cached_key(|p| (rank(p), p.clone()));
        assert_eq!(paths[0], Path::new("/f/DejaVuSans.ttf"));
        assert_eq!(paths[1], Path::new("/f/DejaVuSerif.ttf"));
        assert!(is_font_file(Path::new("/f/A.TTF")) && is_font_file(Path::new("/f/b.otf")));
        assert!(!is_font_file(Path::new("/f/fonts.dir")));
    }

    #[test]
    fn missing_font_message_names_the_package() {
        let message = no_font_message();
        assert!(message.contains("fonts-dejavu-core") && message.contains(FONT_ENV));
        assert!(!register(Path::new("/nonexistent/font.ttf")));
    }
}
