// Why a unit of work did not commit. The three phases of the Unit of Work pattern stay
// apart: an error of the work itself is the body's own error, unchanged; a nested unit
// that cannot merge is `.mergeFailed`; a durable commit that fails is `.commitFailed`,
// which says whether anything may be on disk.
import StrataEngine

/// Strata's failures of a unit of work (`Store.write`, `UnitOfWork.child`) outside the
/// body's own work. In every case but `.commitFailed(.outcomeUnknown)`, nothing of the
/// unit of work was written.
public enum UnitOfWorkError: Error, CustomStringConvertible {
    /// A nested unit's changes met keys its parent changed after the nested unit began
    /// (`ContextError.mergeConflict`); the nested unit was rolled back.
    case mergeFailed(keys: [[UInt8]])
    /// The durable commit failed.
    case commitFailed(CommitFailure)
    /// `write` was called with arguments it cannot honour; the body did not run.
    case invalidRequest(String)

    public var description: String {
        switch self {
        case let .mergeFailed(keys):
            "A nested unit of work conflicted with its parent on \(keys.count) key(s) "
                + "(first: \(renderKey(keys.first ?? []))) and was rolled back; run it again, or settle the keys in one unit."
        case let .commitFailed(failure):
            "\(failure)"
        case let .invalidRequest(reason):
            "The unit of work did not run: \(reason)."
        }
    }
}

/// How a durable commit failed, and whether its outcome is known.
public enum CommitFailure: Error, CustomStringConvertible {
    /// Other commits wrote these keys first (after `attempts` tries); nothing was written.
    case conflict(keys: [[UInt8]], attempts: Int)
    /// The commit was refused before anything reached the log (closed or failed store,
    /// oversized batch); nothing was written.
    case notWritten(any Error)
    /// The log's write or fdatasync failed: the commit may or may not survive a crash.
    /// The store refuses writes until it is reopened; recovery then decides. Over etcd:
    /// the transaction was sent and no answer told whether it was applied; a later read
    /// tells.
    case outcomeUnknown(any Error)

    public var description: String {
        switch self {
        case let .conflict(keys, attempts):
            "The commit conflicted with other commits on \(keys.count) key(s) "
                + "(first: \(renderKey(keys.first ?? []))) after \(attempts) attempt(s); nothing was written. "
                + "Pass retries: to write, or redo the work."
        case let .notWritten(error):
            "The commit was refused and nothing was written: \(error)"
        case let .outcomeUnknown(error):
            (error as? any CommitOutcomeReporting)?.isCommitOutcomeUnknown == true
                ? "The commit may or may not have been made durable; read the keys again to find out: \(error)"
                : "The commit's log write or fdatasync failed, so it may or may not survive; reopen the store to find out: \(error)"
        }
    }

    /// Classifies an error thrown by a root context's commit.
    init(_ error: any Error, attempts: Int) {
        switch error {
        case let ContextError.conflict(keys, _):
            self = .conflict(keys: keys, attempts: attempts)
        case EngineError.log(.commitOutcomeUnknown):
            self = .outcomeUnknown(error)
        case let error as any CommitOutcomeReporting where error.isCommitOutcomeUnknown:
            self = .outcomeUnknown(error)
        default:
            self = .notWritten(error)
        }
    }
}
