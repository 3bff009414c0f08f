// Why a unit of work did not commit: the three cases of the Unit of Work pattern kept
// apart, so a caller knows what was rolled back and whether anything may be on disk.

/// The failure of `Store.write`. In every case but `.commitFailed(.outcomeUnknown)`,
/// nothing of the unit of work was written.
public enum UnitOfWorkError: Error, CustomStringConvertible {
    /// The work itself threw (or its task was cancelled); everything was rolled back.
    case workFailed(any Error)
    /// A nested unit's changes met keys its parent changed after the nested unit began
    /// (`ContextError.mergeConflict`); everything was rolled back.
    case mergeFailed(keys: [[UInt8]])
    /// The durable commit failed.
    case commitFailed(CommitFailure)
    /// `write` was called with arguments it cannot honour; the body did not run.
    case invalidRequest(String)

    public var description: String {
        switch self {
        case let .workFailed(error):
            "The unit of work threw and was rolled back: \(error)"
        case let .mergeFailed(keys):
            "A nested unit of work conflicted with its parent on \(keys.count) key(s) "
                + "(first: \(renderKey(keys.first ?? []))); everything was rolled back."
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
    /// The store refuses writes until it is reopened; recovery then decides.
    case outcomeUnknown(any Error)

    public var description: String {
        switch self {
        case let .conflict(keys, attempts):
            "The commit conflicted with other commits on \(keys.count) key(s) "
                + "(first: \(renderKey(keys.first ?? []))) after \(attempts) attempt(s); nothing was written."
        case let .notWritten(error):
            "The commit was refused and nothing was written: \(error)"
        case let .outcomeUnknown(error):
            "The commit's log write or fdatasync failed, so it may or may not survive; reopen the store to find out: \(error)"
        }
    }

    /// Classifies an error thrown by a root context's commit.
    init(_ error: any Error, attempts: Int) {
        switch error {
        case let ContextError.conflict(keys, _):
            self = .conflict(keys: keys, attempts: attempts)
        case EngineError.log(.commitOutcomeUnknown):
            self = .outcomeUnknown(error)
        default:
            self = .notWritten(error)
        }
    }
}
