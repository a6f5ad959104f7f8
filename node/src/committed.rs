//! A write's outcome inside the node: the command's output, typed as the leader's apply
//! returned it, with the log index and the leader. It becomes the wire's `WriteReply` (the
//! output as JSON) only where it leaves the node, and a forwarded write's reply, which comes
//! from the leader as JSON, is decoded only by the caller that needs the output typed (the
//! agent API's report batches), so no output is encoded and decoded again on its way through.

use hub_engine::CommandOutput;
use hub_proto::WriteReply;
use tonic::Status;

/// The command's output: typed when this node applied it as the leader, or as the leader's
/// JSON when the write was forwarded (passed on unchanged to the client, which may know
/// outputs of a newer release than this node does).
#[derive(Debug, Clone)]
pub enum WriteOutput {
    /// Applied by this node, the leader.
    Applied(CommandOutput),
    /// The leader's reply to a forwarded write, as it sent it (empty from a release that
    /// sent none).
    Forwarded(String),
}

/// A committed write: what it produced, where in the log, and which leader committed it.
#[derive(Debug, Clone)]
pub struct Committed {
    /// The command's output.
    pub output: WriteOutput,
    /// The log index the write was applied at.
    pub index: u64,
    /// The leader that committed it.
    pub leader_id: u64,
    /// The output in words, as the leader summarised it.
    pub result: String,
}

impl Committed {
    /// The outcome of a write this node applied as the leader.
    pub fn applied(output: CommandOutput, index: u64, leader_id: u64) -> Self {
        Committed {
            result: output.summary(),
            output: WriteOutput::Applied(output),
            index,
            leader_id,
        }
    }

    /// The outcome of a forwarded write, from the leader's reply.
    pub fn forwarded(reply: WriteReply) -> Self {
        Committed {
            output: WriteOutput::Forwarded(reply.output_json),
            index: reply.index,
            leader_id: reply.leader_id,
            result: reply.result,
        }
    }

    /// The reply as it travels to a client or a forwarding node.
    pub fn reply(self) -> WriteReply {
        let output_json = match self.output {
            WriteOutput::Applied(output) => serde_json::to_string(&output).unwrap_or_default(),
            WriteOutput::Forwarded(json) => json,
        };
        WriteReply {
            output_json,
            index: self.index,
            leader_id: self.leader_id,
            result: self.result,
        }
    }

    /// The command's output, typed (a forwarded one decoded here, once).
    pub fn typed_output(&self) -> Result<CommandOutput, Status> {
        match &self.output {
            WriteOutput::Applied(output) => Ok(output.clone()),
            WriteOutput::Forwarded(json) => serde_json::from_str(json).map_err(|e| {
                Status::internal(format!("the leader's write output did not decode: {e}"))
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forwarded_output_reads_as_the_applied_one() {
        let output = CommandOutput::Changed {
            id: "p-7-0".into(),
            summary: "issued p-7-0".into(),
        };
        let applied = Committed::applied(output.clone(), 7, 1);
        let forwarded = Committed::forwarded(applied.clone().reply());
        assert_eq!(forwarded.typed_output().expect("decodes"), output);
        assert_eq!(forwarded.clone().reply(), applied.reply());
        let garbled = Committed::forwarded(WriteReply {
            output_json: "{".into(),
            ..Default::default()
        });
        assert!(garbled.typed_output().is_err());
    }
}
