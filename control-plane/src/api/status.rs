//! Where domain errors become gRPC statuses: the one mapping of
//! [`CallError`] (the call path's error) to `tonic::Status`, kind to code,
//! message and details unchanged.

use crate::call::{CallError, Kind};
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
        if e.details.is_empty() {
            Status::new(code, e.message)
        } else {
            Status::with_details(code, e.message, e.details.into())
        }
    }
}
