//! Reads an Ingest request body with a hard bound, decompressing gzip without ever holding more
//! than the bound: a small compressed bomb is refused after 1 MiB of output, not inflated whole.

use std::io::Read;

use crate::ingest::{IngestError, MAX_BODY_BYTES};

/// The content encodings accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Identity,
    Gzip,
}

/// Reads `Content-Encoding`.
pub fn encoding(header: Option<&str>) -> Result<Encoding, IngestError> {
    match header.map(|h| h.trim().to_ascii_lowercase()).as_deref() {
        None | Some("") | Some("identity") => Ok(Encoding::Identity),
        Some("gzip") | Some("x-gzip") => Ok(Encoding::Gzip),
        Some(other) => Err(IngestError::BadRequest(format!(
            "unsupported Content-Encoding `{other}`: send gzip or no encoding"
        ))),
    }
}

/// Checks `Content-Type`: JSON, or text (what `navigator.sendBeacon` sends for a string).
pub fn check_content_type(header: Option<&str>) -> Result<(), IngestError> {
    let Some(raw) = header else {
        return Err(IngestError::BadRequest(
            "a `Content-Type: application/json` (or `text/plain`) header is required".into(),
        ));
    };
    let accepted = raw.parse::<mime::Mime>().is_ok_and(|m| {
        (m.type_() == mime::APPLICATION
            && (m.subtype() == mime::JSON || m.suffix().is_some_and(|s| s == mime::JSON)))
            || (m.type_() == mime::TEXT && m.subtype() == mime::PLAIN)
    });
    if accepted {
        Ok(())
    } else {
        Err(IngestError::BadRequest(format!(
            "unsupported content type `{raw}`: send application/json or text/plain"
        )))
    }
}

/// Reads the whole body, at most [`MAX_BODY_BYTES`] after decompression.
pub async fn read(body: poem::Body, encoding: Encoding) -> Result<Vec<u8>, IngestError> {
    let raw = body
        .into_bytes_limit(MAX_BODY_BYTES)
        .await
        .map_err(|e| match e {
            poem::error::ReadBodyError::PayloadTooLarge => IngestError::TooLarge,
            other => IngestError::BadRequest(format!("could not read the body: {other}")),
        })?;
    match encoding {
        Encoding::Identity => Ok(raw.to_vec()),
        Encoding::Gzip => inflate(&raw),
    }
}

/// Decompresses gzip, stopping one byte past the bound.
pub fn inflate(compressed: &[u8]) -> Result<Vec<u8>, IngestError> {
    let decoder = flate2::read::MultiGzDecoder::new(compressed);
    let mut out = Vec::new();
    decoder
        .take(MAX_BODY_BYTES as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| IngestError::BadRequest(format!("the gzip body is corrupt: {e}")))?;
    if out.len() > MAX_BODY_BYTES {
        return Err(IngestError::TooLarge);
    }
    Ok(out)
}
