//! Versioned binary encoding for everything the store persists and the node sends.
//!
//! A value is one format-version byte followed by its bincode (standard config, serde). A
//! decoder refuses versions it does not know, so a future release can migrate old values
//! instead of misreading them.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// The format version written today.
pub const FORMAT_VERSION: u8 = 1;

/// Why bytes could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// Zero bytes.
    #[error("empty value")]
    Empty,
    /// Written by a release this one cannot read.
    #[error("unknown format version {0} (this release reads {FORMAT_VERSION})")]
    UnknownVersion(u8),
    /// The body is not a valid encoding of the expected type.
    #[error("malformed value: {0}")]
    Malformed(String),
}

/// Encodes `value` behind the format version.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    let mut out = vec![FORMAT_VERSION];
    // Serializing plain data into a Vec has no failure mode (no I/O, no size limit).
    bincode::serde::encode_into_std_write(value, &mut out, bincode::config::standard())
        .expect("encoding into memory cannot fail");
    out
}

/// Decodes bytes produced by [`encode`]; trailing bytes are an error.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    let (&version, body) = bytes.split_first().ok_or(CodecError::Empty)?;
    if version != FORMAT_VERSION {
        return Err(CodecError::UnknownVersion(version));
    }
    let (value, read) = bincode::serde::decode_from_slice(body, bincode::config::standard())
        .map_err(|e| CodecError::Malformed(e.to_string()))?;
    if read != body.len() {
        return Err(CodecError::Malformed(format!(
            "{} trailing bytes",
            body.len() - read
        )));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let bytes = encode(&("x".to_string(), 7u64));
        assert_eq!(bytes[0], FORMAT_VERSION);
        let back: (String, u64) = decode(&bytes).unwrap();
        assert_eq!(back, ("x".to_string(), 7));
        assert!(matches!(decode::<u64>(&[]), Err(CodecError::Empty)));
        assert!(matches!(
            decode::<u64>(&[9, 1]),
            Err(CodecError::UnknownVersion(9))
        ));
        let mut long = encode(&1u8);
        long.push(0);
        assert!(matches!(decode::<u8>(&long), Err(CodecError::Malformed(_))));
        assert!(matches!(
            decode::<String>(&[1, 200]),
            Err(CodecError::Malformed(_))
        ));
    }
}
