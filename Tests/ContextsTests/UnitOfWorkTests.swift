import Strata
import StrataFileIO
import StrataTesting
import Foundation
import TestBackends
import Testing

private struct UseCaseFailed: Error {}

@Suite struct UnitOfWorkTests {
    @Test(arguments: Backend.allCases) func writeCommitsOnReturnAsOneVersion(backend: Backend) async throws {
        try await backend.withStore { store throws in
            let before = store.version
            let total = try store.write { unit in
                try unit.put(bytes("a"), bytes("1"))
                try unit.put(bytes("b"), bytes("2"))
                return 3
            }
            #expect(total == 3)
            #expect(store.version == before + 1)
            #expect(keys(try store.makeContext().scan()) == ["a", "b"])
        }
    }

    @Test func aReadOnlyStoreReadsAndRefusesUnitsOfWorkWithoutWritingAByte() async throws {
        let (writer, fileSystem) = try simulatedStore()
        try seed(writer, ["kept": "1"])
        try writer.close()
        let changesBefore = FileOperation.allCases.filter(\.isMutating).map { fileSystem.count(of: $0) }
        let store = try Store.open(path: "/db", mode: .readOnly, fileSystem: fileSystem)
        #expect(try await store.read { try $0.get(bytes("kept")) } == bytes("1"))
        var ran = false
        #expect {
            try store.write { unit in
                try unit.put(bytes("new"), bytes("2"))
                unit.afterCommit { _ in ran = true }
            }
        } throws: { error in
            guard case let UnitOfWorkError.commitFailed(.notWritten(cause)) = error, case EngineError.readOnly = cause else {
                return false
            }
            return true
        }
        await #expect(throws: UnitOfWorkError.self) {
            try await store.write { unit in try unit.put(bytes("async"), bytes("3")) }
        }
        // A context refuses its commit the same way.
        let context = store.makeContext()
        try context.put(bytes("direct"), bytes("4"))
        #expect(throws: (any Error).self) { try context.commit() }
        #expect(!ran)
        try store.close()
        #expect(FileOperation.allCases.filter(\.isMutating).map { fileSystem.count(of: $0) } == changesBefore)
    }

    @Test func rolledBackUnitLeavesNoTraceAndRunsNoHook() throws {
        let (store, fileSystem) = try simulatedStore()
        try seed(store, ["kept": "1"])
        let before = (store.version, fileSystem.operationCount)
        var hookRan = false
        // The body's error reaches the caller as itself, after the rollback.
        #expect(throws: UseCaseFailed.self) {
            try store.write { unit in
                try unit.put(bytes("kept"), bytes("changed"))
                try unit.put(bytes("new"), bytes("x"))
                unit.afterCommit { _ in hookRan = true }
                throw UseCaseFailed()
            }
        }
        #expect(!hookRan)
        #expect(store.version == before.0 && fileSystem.operationCount == before.1)
        #expect(text(try store.makeContext().get(bytes("kept"))) == "1")
        #expect(try store.makeContext().get(bytes("new")) == nil)
    }

    @Test(arguments: Backend.allCases) func nestedUnitThatThrowsRollsBackOnlyItself(backend: Backend) async throws {
        try await backend.withStore { store throws in
            try store.write { unit in
                try unit.put(bytes("outer"), bytes("1"))
                do {
                    try unit.child { nested in
                        try nested.put(bytes("inner"), bytes("2"))
                        throw UseCaseFailed()
                    }
                    Issue.record("the nested unit's error did not propagate")
                } catch is UseCaseFailed {}
                try unit.child { nested in try nested.put(bytes("kept"), bytes("3")) }
                #expect(try unit.get(bytes("inner")) == nil)
            }
            #expect(keys(try store.makeContext().scan()) == ["kept", "outer"])
        }
    }

    @Test(arguments: Backend.allCases) func nestedUnitErrorThatEscapesRollsBackEverything(backend: Backend) async throws {
        try await backend.withStore { store throws in
            #expect(throws: UseCaseFailed.self) {
                try store.write { unit in
                    try unit.put(bytes("outer"), bytes("1"))
                    try unit.child { _ in throw UseCaseFailed() }
                }
            }
            #expect(try store.makeContext().scan().isEmpty)
        }
    }

    @Test(arguments: Backend.allCases) func failedMergeIsItsOwnCase(backend: Backend) async throws {
        try await backend.withStore { store throws in
            var hookRan = false
            #expect {
                try store.write { outer in
                    try outer.child { nested in
                        try nested.put(bytes("k"), bytes("nested"))
                        nested.afterCommit { _ in hookRan = true }
                        // The parent changes the same key while the nested unit is open.
                        try outer.put(bytes("k"), bytes("outer"))
                    }
                }
            } throws: { error in
                guard case let UnitOfWorkError.mergeFailed(keys) = error else { return false }
                return keys == [bytes("k")]
            }
            #expect(!hookRan)
            #expect(try store.makeContext().get(bytes("k")) == nil)
        }
    }

    @Test func hooksRunAfterTheDurableCommitInOrderIncludingNestedOnes() throws {
        let (store, fileSystem) = try simulatedStore()
        var events: [String] = []
        try store.write { unit in
            try unit.put(bytes("banana"), bytes("eaten"))
            unit.afterCommit { receipt in
                // The commit is durable and visible when the hook runs.
                events.append("outer v\(receipt.version) durable=\(fileSystem.count(of: .syncData) > 0)")
            }
            try unit.child { nested in
                try nested.put(bytes("child"), bytes("fed"))
                nested.afterCommit { _ in events.append("nested") }
            }
            try? unit.child { nested in
                nested.afterCommit { _ in events.append("rolled back") }
                throw UseCaseFailed()
            }
            #expect(events.isEmpty)
        }
        #expect(events == ["outer v\(store.version) durable=true", "nested"])
    }

    @Test func failedDurableCommitReportsUnknownOutcomeAndRunsNoHook() throws {
        let (store, fileSystem) = try simulatedStore()
        var hookRan = false
        fileSystem.failNext(.syncData)
        #expect {
            try store.write { unit in
                try unit.put(bytes("k"), bytes("v"))
                unit.afterCommit { _ in hookRan = true }
            }
        } throws: { error in
            guard case UnitOfWorkError.commitFailed(.outcomeUnknown) = error else { return false }
            return true
        }
        #expect(!hookRan)
        // The store does not pretend: later writes are refused, and nothing was written.
        #expect {
            try store.write { try $0.put(bytes("later"), bytes("v")) }
        } throws: { error in
            guard case UnitOfWorkError.commitFailed(.notWritten) = error else { return false }
            return true
        }
    }

    @Test(arguments: Backend.allCases) func commitToAClosedStoreIsKnownNotWritten(backend: Backend) async throws {
        try await backend.withStore { store throws in
            try store.close()
            #expect {
                try store.write { try $0.put(bytes("k"), bytes("v")) }
            } throws: { error in
                guard case UnitOfWorkError.commitFailed(.notWritten) = error else { return false }
                return "\(error)".contains("closed")
            }
        }
    }

    @Test(arguments: Backend.allCases, [0, 1, 3])
    func conflictIsRetriedUpToTheBound(backend: Backend, retries: Int) async throws {
        try await backend.withStore { store throws in
            try seed(store, ["counter": "0"])
            // The first two attempts each lose to a commit made while they run.
            var attempts = 0
            do {
                try store.write(retries: retries) { unit in
                    attempts += 1
                    let value = Int(text(try unit.get(bytes("counter")))!)!
                    if attempts <= 2 { try seed(store, ["counter": "\(value + 100)"]) }
                    try unit.put(bytes("counter"), bytes("\(value + 1)"))
                }
                #expect(retries >= 2 && attempts == 3)
                #expect(text(try store.makeContext().get(bytes("counter"))) == "201")
            } catch {
                guard case let UnitOfWorkError.commitFailed(.conflict(conflicting, tries)) = error else {
                    Issue.record("expected a conflict, got \(error)")
                    return
                }
                #expect(retries < 2 && tries == retries + 1 && attempts == retries + 1)
                #expect(conflicting == [bytes("counter")])
            }
        }
    }

    @Test(arguments: Backend.allCases) func negativeRetriesAreRefusedBeforeTheBodyRuns(backend: Backend) async throws {
        try await backend.withStore { store throws in
            var ran = false
            #expect {
                try store.write(retries: -1) { _ in ran = true }
            } throws: { error in
                guard case let UnitOfWorkError.invalidRequest(reason) = error else { return false }
                return reason.contains("-1")
            }
            #expect(!ran)
        }
    }

    @Test(arguments: Backend.allCases) func readNeverConflicts(backend: Backend) async throws {
        try await backend.withStore { store throws in
            try seed(store, ["k": "1"])
            let value = try store.read { context in
                try seed(store, ["k": "2"])
                return try context.get(bytes("k"))
            }
            #expect(text(value) == "1")
        }
    }

    @Test(arguments: Backend.allCases) func asyncWriteCommitsAndRollsBack(backend: Backend) async throws {
        let store = try await backend.makeStore()
        defer { try? store.close() }
        let version = try await store.write { unit in
            try unit.put(bytes("async"), bytes("1"))
            await Task.yield()
            return 7
        }
        #expect(version == 7)
        await #expect(throws: UseCaseFailed.self) {
            try await store.write { unit in
                try unit.put(bytes("rolled"), bytes("back"))
                throw UseCaseFailed()
            }
        }
        #expect(keys(try store.makeContext().scan()) == ["async"])
    }

    @Test(arguments: Backend.allCases) func cancelledTaskRollsBack(backend: Backend) async throws {
        let store = try await backend.makeStore()
        defer { try? store.close() }
        let task = Task {
            try await store.write { unit in
                try unit.put(bytes("cancelled"), bytes("x"))
                withUnsafeCurrentTask { $0?.cancel() }
            }
        }
        let result = await task.result
        guard case let .failure(error) = result else {
            Issue.record("expected a rollback, got \(result)")
            return
        }
        #expect(error is CancellationError)
        #expect(try store.makeContext().get(bytes("cancelled")) == nil)
    }

    @Test func hundredConcurrentAsyncWritesOnTwoThreadsCompleteWithoutBlockingThem() async throws {
        let fileSystem = SimulatedFileSystem()
        fileSystem.setSyncLatency(.milliseconds(2))
        let store = try Store.open(path: "/db", fileSystem: fileSystem)
        let executor = TwoThreadExecutor()
        // Any fdatasync on the executor's threads means a task blocked one of them.
        let syncsOnExecutor = Shared(0)
        fileSystem.observeSyncs { _ in
            if executor.isCurrentThread { syncsOnExecutor.withLock { $0 += 1 } }
        }
        let before = fileSystem.count(of: .syncData)
        try await withTaskExecutorPreference(executor) {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0..<100 {
                    group.addTask {
                        try await store.write { unit in try unit.put(bytes("key\(index)"), bytes("\(index)")) }
                    }
                }
                try await group.waitForAll()
            }
        }
        #expect(syncsOnExecutor.withLock { $0 } == 0)
        #expect(try store.makeContext().scan().count == 100)
        let syncs = fileSystem.count(of: .syncData) - before
        print("100 async writes on 2 threads: \(syncs) fdatasyncs, \(store.engine.logStatistics.largestGroup) in the largest group")
        #expect(syncs >= 1 && syncs <= 100)
        executor.stop()
    }
}

/// A task executor with exactly two threads: a cooperative pool of two.
final class TwoThreadExecutor: TaskExecutor, @unchecked Sendable {
    // `monitor` guards `jobs`, `stopped` and `threadIDs`.
    private let monitor = NSCondition()
    private var jobs: [UnownedJob] = []
    private var stopped = false
    private var threadIDs: Set<pthread_t> = []

    init() {
        for _ in 0..<2 {
            Thread.detachNewThread { [self] in run() }
        }
    }

    var isCurrentThread: Bool {
        monitor.lock()
        defer { monitor.unlock() }
        return threadIDs.contains(pthread_self())
    }

    func enqueue(_ job: UnownedJob) {
        monitor.lock()
        jobs.append(job)
        monitor.broadcast()
        monitor.unlock()
    }

    func stop() {
        monitor.lock()
        stopped = true
        monitor.broadcast()
        monitor.unlock()
    }

    private func run() {
        monitor.lock()
        threadIDs.insert(pthread_self())
        monitor.unlock()
        while true {
            monitor.lock()
            while jobs.isEmpty && !stopped { monitor.wait() }
            guard !jobs.isEmpty else { monitor.unlock(); return }
            let job = jobs.removeFirst()
            monitor.unlock()
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}
