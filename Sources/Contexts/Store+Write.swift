// Units of work on a store: `write` runs a body in a fresh root context and commits it
// durably on return or rolls it back on throw; `retries` reruns the body after a
// conflict. The async forms run the body on the caller's actor (`isolation`), suspend
// during the fdatasync and roll back on cancellation.
//
// Errors: what the body throws reaches the caller as itself, after the rollback. Strata's
// own failures of the other two phases of a unit of work are `UnitOfWorkError`:
// `.mergeFailed` (a nested unit could not merge; thrown inside the body by `child`) and
// `.commitFailed` (the durable commit), so a caller can tell which phase failed.
import StrataEngine

extension Store {
    /// Runs `body` as one unit of work: if it returns, its changes are committed as one
    /// durable commit and then its `afterCommit` hooks run; if it throws, nothing is kept
    /// and the error reaches the caller unchanged. After a conflict with another commit
    /// the body is run again on a fresh context, up to `retries` more times (so it must
    /// have no effects outside the unit: put those in `afterCommit`). Blocks the calling
    /// thread during the fdatasync: from async code use the async `write`.
    ///
    /// Throws what `body` throws, or `UnitOfWorkError.commitFailed` when the durable
    /// commit fails (`.invalidRequest` for a negative `retries`).
    @discardableResult
    public func write<T>(retries: Int = 0, _ body: (UnitOfWork) throws -> T) throws -> T {
        try checkRetries(retries)
        var attempt = 0
        while true {
            attempt += 1
            let unit = UnitOfWork(context: makeContext())
            let result: T
            do {
                result = try body(unit)
            } catch {
                unit.context.discard()
                throw error
            }
            do {
                unit.committed(try unit.context.commit())
                return result
            } catch {
                try retryOrThrow(error, attempt: attempt, retries: retries)
            }
        }
    }

    /// `write` for async code. `body` runs on the caller's actor (`isolation` defaults to
    /// it), so a `@MainActor` model or an actor may use its own state inside; `body` may
    /// suspend. The wait for the fdatasync suspends instead of blocking a thread of the
    /// cooperative pool. Cancelling the task before the commit starts rolls the unit back
    /// and throws `CancellationError`; a commit that has started finishes.
    @discardableResult
    public func write<T>(
        isolation: isolated (any Actor)? = #isolation,
        retries: Int = 0,
        _ body: nonisolated(nonsending) (UnitOfWork) async throws -> T
    ) async throws -> T {
        try checkRetries(retries)
        var attempt = 0
        while true {
            attempt += 1
            let unit = UnitOfWork(context: makeContext())
            let result: T
            do {
                result = try await body(unit)
                try Task.checkCancellation()
            } catch {
                unit.context.discard()
                throw error
            }
            do {
                unit.committed(try await unit.context.commit())
                return result
            } catch {
                try retryOrThrow(error, attempt: attempt, retries: retries)
            }
        }
    }

    /// `write` from async code with a body that does not suspend: it still runs on the
    /// caller's actor and still suspends, never blocks, during the fdatasync. (Async
    /// callers get this overload, not the blocking one.)
    @discardableResult
    public func write<T>(
        isolation: isolated (any Actor)? = #isolation,
        retries: Int = 0,
        _ body: (UnitOfWork) throws -> T
    ) async throws -> T {
        // Named by type: a plain call here would pick this overload again.
        let run: (isolated (any Actor)?, Int, nonisolated(nonsending) (UnitOfWork) async throws -> T) async throws -> T = write
        return try await run(isolation, retries, body)
    }

    /// Runs `body` on a read-only context at the latest version, on the caller's actor: it
    /// never conflicts and never writes (a write throws `ContextError.readOnly`).
    /// Rethrows what `body` throws.
    public func read<T>(
        isolation: isolated (any Actor)? = #isolation,
        _ body: nonisolated(nonsending) (Context) async throws -> T
    ) async rethrows -> T {
        let context = makeReadOnlyContext()
        defer { context.discard() }
        return try await body(context)
    }

    /// `read` from async code with a body that does not suspend: `try await store.read {
    /// … }` picks this overload, as for `write`, not the synchronous one (which drew "no
    /// 'async' operations occur within 'await' expression"). Runs on the caller's actor.
    public func read<T>(
        isolation: isolated (any Actor)? = #isolation,
        _ body: (Context) throws -> T
    ) async rethrows -> T {
        let context = makeReadOnlyContext()
        defer { context.discard() }
        return try body(context)
    }

    private func checkRetries(_ retries: Int) throws(UnitOfWorkError) {
        guard retries >= 0 else { throw .invalidRequest("retries is \(retries); give 0 or more") }
    }

    /// Returns when a failed commit should be run again (a conflict, with retries left);
    /// otherwise throws the failure.
    private func retryOrThrow(_ error: any Error, attempt: Int, retries: Int) throws(UnitOfWorkError) {
        let failure = CommitFailure(error, attempts: attempt)
        if case .conflict = failure, attempt <= retries { return }
        throw .commitFailed(failure)
    }
}
