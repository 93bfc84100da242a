//! Where domain errors become gRPC statuses: the one mapping of
//! [`CallError`] (the call path's error) to `tonic::Status`, kind to code,
//! message and details unchanged, and of the stage modules' errors
//! ([`BackgroundError`], [`InteractionError`]).

use crate::background::BackgroundError;
use crate::call::{CallError, Kind};
use crate::interactions::InteractionError;
use tonic::{Code, Status};

impl From<CallError> for Status {
    fn from(e: CallError) -> Status {
        let code = match e.kind {
            Kind::NotFound => Code::NotFound,
            Kind::InvalidArgument => Code::InvalidArgument,
            Kind::FailedPrecondition => Code::FailedPrecondition,
            Kind::AlreadyExists => Code::AlreadyExists,
            Kind::Aborted => Code::Aborted,
            Kind::Unavailable => Code::Unavailable,
            Kind::DeadlineExceeded => Code::DeadlineExceeded,
            Kind::Cancelled => Code::Cancelled,
            Kind::ResourceExhausted => Code::ResourceExhausted,
            Kind::PermissionDenied => Code::PermissionDenied,
            Kind::Internal => Code::Internal,
            Kind::Unimplemented => Code::Unimplemented,
            Kind::Unauthenticated => Code::Unauthenticated,
            Kind::OutOfRange => Code::OutOfRange,
            Kind::DataLoss => Code::DataLoss,
            Kind::Unknown => Code::Unknown,
        };
        // Bounded: a status travels in HTTP/2 headers.
        switchyard_proto::status::bounded(code, e.message, &e.details)
    }
}

impl From<BackgroundError> for Status {
    fn from(e: BackgroundError) -> Status {
        match &e {
            BackgroundError::Invalid(_) => Status::invalid_argument(e.to_string()),
            BackgroundError::NotFound(_) | BackgroundError::UnknownServer(_) => {
                Status::not_found(e.to_string())
            }
            BackgroundError::Finished { .. } | BackgroundError::NotRegistered { .. } => {
                Status::failed_precondition(e.to_string())
            }
            BackgroundError::Contention(_) => Status::aborted(e.to_string()),
            BackgroundError::Store(_) => Status::unavailable(format!(
                "store unavailable: {}",
                switchyard_common::error_chain(&e)
            )),
        }
    }
}

impl From<InteractionError> for tonic::Status {
    fn from(e: InteractionError) -> Self {
        let msg = e.to_string();
        match e {
            InteractionError::NotFound { .. } | InteractionError::UnknownSession(_) => {
                tonic::Status::not_found(msg)
            }
            InteractionError::Invalid(_) => tonic::Status::invalid_argument(msg),
            InteractionError::InvalidForm(errors) => switchyard_proto::status::bounded(
                Code::InvalidArgument,
                msg,
                serde_json::json!({"fieldErrors": errors.0})
                    .to_string()
                    .as_bytes(),
            ),
            InteractionError::Precondition(_) => tonic::Status::failed_precondition(msg),
            InteractionError::Conflict(_) => tonic::Status::already_exists(msg),
            InteractionError::Store(_) | InteractionError::ShuttingDown => {
                tonic::Status::unavailable(msg)
            }
            InteractionError::Contention(_) => tonic::Status::aborted(msg),
        }
    }
}
