//! A CA bundle read from a file (`hubctl env registry set --ca-file`, `hub-node
//! --outbound-ca-file`), checked by the rules the hub applies to a bundle it stores, before
//! it is sent or used.

/// Why a CA file (`hubctl env registry set --ca-file`, `hub-node --outbound-ca-file`) was
/// refused.
#[derive(Debug, thiserror::Error)]
pub enum CaFileError {
    /// It cannot be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// It is larger than a CA bundle may be.
    #[error("{path}: {size} bytes, at most {max} allowed", max = hub_engine::artifact::MAX_CA_PEM_LEN)]
    TooLarge {
        /// The file.
        path: String,
        /// Its size.
        size: u64,
    },
    /// It is not a PEM bundle of certificates.
    #[error("{path}: {reason}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// Reads a CA file: at most [`hub_engine::artifact::MAX_CA_PEM_LEN`] bytes of PEM with at
/// least one certificate (checked by size before it is read).
pub fn read_ca_file(path: &std::path::Path) -> Result<String, CaFileError> {
    let shown = path.display().to_string();
    let read = |source| CaFileError::Read {
        path: shown.clone(),
        source,
    };
    let size = std::fs::metadata(path).map_err(read)?.len();
    if size > hub_engine::artifact::MAX_CA_PEM_LEN as u64 {
        return Err(CaFileError::TooLarge { path: shown, size });
    }
    let pem = std::fs::read_to_string(path).map_err(read)?;
    hub_engine::artifact::validate_ca_pem(&pem).map_err(|reason| CaFileError::Invalid {
        path: shown.clone(),
        reason,
    })?;
    Ok(pem)
}
