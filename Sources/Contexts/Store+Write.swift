// Units of work on a store: `write` runs a body in a fresh root context and commits it
// durably on return or rolls it back on throw; `retries` reruns the body after a
// conflict. The async form suspends during the fdatasync and rolls back on cancellation.
import Engine

extension Store {
    /// Runs `body` as one unit of work: if it returns, its changes are committed as one
    /// durable commit and then its `afterCommit` hooks run; if it throws, nothing is kept.
    /// After a conflict with another commit the body is run again on a fresh context, up
    /// to `retries` more times (so it must have no effects outside the unit: put those in
    /// `afterCommit`). Blocks the calling thread during the fdatasync.
    /// Throws `UnitOfWorkError`, which tells the three failures apart.
    @discardableResult
    public func write<T>(retries: Int = 0, _ body: (UnitOfWork) throws -> T) throws(UnitOfWorkError) -> T {
        guard retries >= 0 else { throw .invalidRequest("retries is \(retries); give 0 or more") }
        var attempt = 0
        while true {
            attempt += 1
            let unit = UnitOfWork(context: makeContext())
            let result: T
            do {
                result = try body(unit)
            } catch {
                throw rollBack(unit, after: error)
            }
            do {
                unit.committed(try unit.context.commit())
                return result
            } catch {
                try retryOrThrow(error, attempt: attempt, retries: retries)
            }
        }
    }

    /// `write` for async code: `body` may suspend, the fdatasync wait suspends instead of
    /// blocking a thread of the cooperative pool, and cancelling the task before the
    /// commit starts rolls the unit back (`.workFailed(CancellationError())`). A commit
    /// that has started finishes.
    @discardableResult
    public func write<T>(retries: Int = 0, _ body: (UnitOfWork) async throws -> T) async throws(UnitOfWorkError) -> T {
        try await writeAsync(retries: retries, body)
    }

    /// `write` from async code with a body that does not suspend: still suspends, not
    /// blocks, during the fdatasync. (Async callers get this overload, not the blocking one.)
    @discardableResult
    public func write<T>(retries: Int = 0, _ body: (UnitOfWork) throws -> T) async throws(UnitOfWorkError) -> T {
        try await writeAsync(retries: retries, body)
    }

    private func writeAsync<T>(retries: Int, _ body: (UnitOfWork) async throws -> T) async throws(UnitOfWorkError) -> T {
        guard retries >= 0 else { throw .invalidRequest("retries is \(retries); give 0 or more") }
        var attempt = 0
        while true {
            attempt += 1
            let unit = UnitOfWork(context: makeContext())
            let result: T
            do {
                result = try await body(unit)
                try Task.checkCancellation()
            } catch {
                throw rollBack(unit, after: error)
            }
            do {
                unit.committed(try await unit.context.commit())
                return result
            } catch {
                try retryOrThrow(error, attempt: attempt, retries: retries)
            }
        }
    }

    /// Returns when a failed commit should be run again (a conflict, with retries left);
    /// otherwise throws the failure.
    private func retryOrThrow(_ error: any Error, attempt: Int, retries: Int) throws(UnitOfWorkError) {
        let failure = CommitFailure(error, attempts: attempt)
        if case .conflict = failure, attempt <= retries { return }
        throw .commitFailed(failure)
    }

    private func rollBack(_ unit: UnitOfWork, after error: any Error) -> UnitOfWorkError {
        unit.context.discard()
        if let error = error as? UnitOfWorkError { return error }
        return .workFailed(error)
    }
}
