//! The operator token a client sends with every call.

use hub_engine::token::TokenSecret;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::Status;

/// The `authorization: Bearer` header of an operator token, added to every call; none for a
/// caller with a certificate. Marked sensitive, and never shown by `Debug`.
#[derive(Clone, Default)]
pub struct Bearer(Option<MetadataValue<Ascii>>);

impl Bearer {
    /// The header of `secret`.
    pub fn new(secret: &TokenSecret) -> Bearer {
        // `Bearer hubtok_` and hex digits: always a valid header value.
        let mut value = MetadataValue::try_from(format!("Bearer {}", secret.reveal()))
            .expect("a token's text is ASCII");
        value.set_sensitive(true);
        Bearer(Some(value))
    }
}

impl std::fmt::Debug for Bearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Bearer(redacted)"
        } else {
            "Bearer(none)"
        })
    }
}

impl Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        if let Some(value) = &self.0 {
            req.metadata_mut().insert("authorization", value.clone());
        }
        Ok(req)
    }
}
