//! The codec of every generated service and client: prost's, except that a message that does
//! not decode is `INVALID_ARGUMENT` naming the field (`failed to decode Protobuf message:
//! QueryRequest.query_json: invalid string value: data is not UTF-8 encoded`). prost's codec
//! answers `INTERNAL`, which says the node failed, when the caller sent bytes that are not
//! the message (invalid UTF-8 in a string, a truncated field).

use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic::{Code, Status};
use tonic_prost::{ProstCodec, ProstDecoder};

/// [`ProstCodec`] with decode failures as `INVALID_ARGUMENT`.
#[derive(Debug, Clone)]
pub struct HubCodec<T, U>(ProstCodec<T, U>);

impl<T, U> Default for HubCodec<T, U> {
    fn default() -> Self {
        HubCodec(ProstCodec::default())
    }
}

impl<T, U> Codec for HubCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = <ProstCodec<T, U> as Codec>::Encoder;
    type Decoder = HubDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        self.0.encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        HubDecoder(self.0.decoder())
    }
}

/// [`ProstDecoder`] with decode failures as `INVALID_ARGUMENT`.
#[derive(Debug, Clone)]
pub struct HubDecoder<U>(ProstDecoder<U>);

impl<U: prost::Message + Default> Decoder for HubDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        // prost's decoder fails only on the message's bytes (INTERNAL, by the gRPC table of
        // codes); the message names the field.
        self.0.decode(buf).map_err(|s| match s.code() {
            Code::Internal => Status::invalid_argument(s.message().to_string()),
            _ => s,
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    /// What the codec relies on: prost names the message and the field that did not decode.
    #[test]
    fn prost_names_the_field_whose_string_is_not_utf8() {
        // Field 1 (`query_json`), length-delimited, two bytes that are not UTF-8.
        let err = crate::QueryRequest::decode(&[0x0a, 0x02, 0xff, 0xfe][..]).unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("QueryRequest.query_json") && message.contains("UTF-8"),
            "{message}"
        );
    }
}
