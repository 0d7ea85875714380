//! Railyard's wire contract, `railyard.v1`: what a client and the server must agree on.
//!
//! - [`v1`]: the generated message types and the `History` / `Tasks` / `Schedules` /
//!   `Batches` / `Triggers` / `Admin` service stubs, from `proto/railyard/v1/`: one
//!   file per service and `common.proto`, the messages several of them share.
//! - [`codec`]: the protobuf codec those stubs use.
//! - [`checkpoint`], [`PEER_SUBJECT`], [`MAX_MESSAGE_BYTES`], [`DEFAULT_NAMESPACE`]:
//!   what both ends compute or compare, from `railyard-wire` (re-exported).
//!
//! The typed client (connect, retries, `StepWorker`) is the `railyard-sdk` crate.

#![warn(missing_docs)]

pub mod codec;

pub use railyard_wire::{DEFAULT_NAMESPACE, MAX_MESSAGE_BYTES, PEER_SUBJECT, checkpoint, spawn_request_id};

/// Generated `railyard.v1` types and service stubs.
pub mod v1 {
    #![allow(missing_docs, clippy::all)]
    tonic::include_proto!("railyard.v1");

    /// Encoded file descriptor set, for the gRPC reflection service.
    pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("railyard_descriptor");
}

impl v1::RunStatus {
    /// The short name people type and read (`RUNNING`, `COMPLETED` ...).
    pub fn short_name(self) -> &'static str {
        match self {
            Self::Unspecified => "UNSPECIFIED",
            Self::Running => "RUNNING",
            Self::Completed => "COMPLETED",
            Self::Failed => "FAILED",
            Self::Canceled => "CANCELED",
            Self::Terminated => "TERMINATED",
            Self::TimedOut => "TIMED_OUT",
        }
    }

    /// Parses a short name, case-insensitively.
    pub fn from_short_name(name: &str) -> Option<Self> {
        let upper = name.to_ascii_uppercase();
        [
            Self::Running,
            Self::Completed,
            Self::Failed,
            Self::Canceled,
            Self::Terminated,
            Self::TimedOut,
        ]
        .into_iter()
        .find(|s| s.short_name() == upper)
    }

    /// Whether a run in this status can still change.
    pub fn is_open(self) -> bool {
        matches!(self, Self::Running)
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    /// The fields of `google.protobuf.FileDescriptorSet` these tests read.
    #[derive(Clone, PartialEq, Message)]
    struct FileSet {
        #[prost(message, repeated, tag = "1")]
        file: Vec<File>,
    }

    #[derive(Clone, PartialEq, Message)]
    struct File {
        #[prost(string, tag = "1")]
        name: String,
        #[prost(string, tag = "2")]
        package: String,
        #[prost(string, repeated, tag = "3")]
        dependency: Vec<String>,
        #[prost(message, repeated, tag = "4")]
        message_type: Vec<Named>,
        #[prost(message, repeated, tag = "5")]
        enum_type: Vec<Named>,
        #[prost(message, repeated, tag = "6")]
        service: Vec<Named>,
    }

    #[derive(Clone, PartialEq, Message)]
    struct Named {
        #[prost(string, tag = "1")]
        name: String,
    }

    #[test]
    fn the_descriptor_set_holds_each_service_in_its_file_and_every_import() {
        let set = FileSet::decode(super::v1::FILE_DESCRIPTOR_SET).unwrap();
        let names: Vec<&str> = set.file.iter().map(|f| f.name.as_str()).collect();
        for f in &set.file {
            assert_eq!(f.package, "railyard.v1", "{}", f.name);
            // Reflection answers a file with its imports: each is in the set.
            for d in &f.dependency {
                assert!(names.contains(&d.as_str()), "{} imports {d}", f.name);
            }
        }
        let services: Vec<(&str, &str)> = set
            .file
            .iter()
            .flat_map(|f| f.service.iter().map(|s| (s.name.as_str(), f.name.as_str())))
            .collect();
        assert_eq!(
            services,
            [
                ("History", "railyard/v1/history.proto"),
                ("Tasks", "railyard/v1/tasks.proto"),
                ("Schedules", "railyard/v1/schedules.proto"),
                ("Batches", "railyard/v1/batches.proto"),
                ("Triggers", "railyard/v1/triggers.proto"),
                ("Admin", "railyard/v1/admin.proto"),
                ("Capacity", "railyard/v1/capacity.proto"),
            ]
        );
        let common = set
            .file
            .iter()
            .find(|f| f.name == "railyard/v1/common.proto")
            .expect("the shared messages' file");
        assert!(common.service.is_empty() && common.dependency.is_empty());
        assert!(common.message_type.iter().any(|m| m.name == "RunInfo"));
        // One package: no type is defined twice.
        let mut types: Vec<&str> = set
            .file
            .iter()
            .flat_map(|f| f.message_type.iter().chain(&f.enum_type))
            .map(|t| t.name.as_str())
            .collect();
        let all = types.len();
        types.sort_unstable();
        types.dedup();
        assert_eq!(types.len(), all);
    }
}
