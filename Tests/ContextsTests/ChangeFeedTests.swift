import Strata
import StrataTesting
import TestBackends
import Testing

@Suite struct ChangeFeedTests {
    @Test(arguments: Backend.allCases) func liveFeedDeliversCommittedChangeSetsInOrder(backend: Backend) async throws {
        let store = try await backend.makeStore()
        defer { try? store.close() }
        let feed = try store.changes()
        let start = store.version
        try seed(store, ["a": "1"])
        try await store.write { unit in
            try unit.delete(bytes("a"))
            try unit.put(bytes("b"), bytes("2"))
        }
        // A rolled-back unit publishes nothing.
        try? await store.write { unit in
            try unit.put(bytes("never"), bytes("x"))
            throw ContextError.readOnly
        }
        try seed(store, ["c": "3"])
        var received: [ChangeSet] = []
        for try await changeSet in feed {
            received.append(changeSet)
            if received.count == 3 { break }
        }
        #expect(received.map(\.version) == [start + 1, start + 2, start + 3])
        #expect(received[1].changes == [Change(key: bytes("a"), value: nil), Change(key: bytes("b"), value: bytes("2"))])
        #expect(received[2].changes == [Change(key: bytes("c"), value: bytes("3"))])
    }

    @Test(arguments: Backend.allCases) func feedFromAnEarlierVersionReplaysTheLogThenGoesLive(backend: Backend) async throws {
        let store = try await backend.makeStore()
        defer { try? store.close() }
        let start = store.version
        for index in 0..<5 { try seed(store, ["k\(index)": "\(index)"]) }
        let feed = try store.changes(after: start + 2)
        try seed(store, ["live": "yes"])
        var versions: [UInt64] = []
        for try await changeSet in feed {
            versions.append(changeSet.version)
            if versions.count == 4 { break }
        }
        #expect(versions == [start + 3, start + 4, start + 5, start + 6])
    }

    @Test(arguments: Backend.allCases) func feedSurvivesConcurrentCommitsWithoutGapsOrRepeats(backend: Backend) async throws {
        let store = try await backend.makeStore()
        defer { try? store.close() }
        let start = store.version
        for index in 0..<20 { try seed(store, ["before\(index)": "x"]) }
        let writer = Task.detached {
            for index in 0..<200 { try seed(store, ["during\(index)": "x"]) }
        }
        let feed = try store.changes(after: start)
        var versions: [UInt64] = []
        for try await changeSet in feed {
            versions.append(changeSet.version)
            if versions.count == 220 { break }
        }
        try await writer.value
        #expect(versions == Array((start + 1)...(start + 220)))
    }

    @Test func historyReleasedByACheckpointIsAClearError() throws {
        var options = EngineOptions()
        options.log.segmentBytes = 64 << 10
        // Without history a checkpoint releases the log for good (HistoryRetentionTests has
        // the window).
        options.log.history = .none
        let (store, _) = try simulatedStore(options: options)
        let start = store.version
        // Values that do not compress, so the log spans several segments.
        var generator = SplitMix64(seed: 7)
        for index in 0..<400 {
            try store.write { unit in
                try unit.put(bytes("key\(index)"), (0..<400).map { _ in UInt8.random(in: 0...255, using: &generator) })
            }
        }
        try store.engine.checkpoint()
        #expect(store.engine.oldestLoggedVersion > start + 1)
        #expect {
            _ = try store.changes(after: start)
        } throws: { error in
            guard case EngineError.historyUnavailable(requested: start + 1, _) = error else { return false }
            return "\(error)".contains("WALOptions.history")
        }
    }

    @Test(arguments: Backend.allCases) func closingTheStoreEndsTheFeed(backend: Backend) async throws {
        let store = try await backend.makeStore()
        defer { try? store.close() }
        let feed = try store.changes()
        try seed(store, ["a": "1"])
        try store.close()
        var count = 0
        for try await _ in feed { count += 1 }
        #expect(count == 1)
    }
}

@Suite struct CommitObserverCostTests {
    /// An observer is reached through the same call depth at the 2,000th commit as at the
    /// 10th. (The engine once kept its observer closure in a generic lock and re-wrapped it
    /// on every read, so each commit went through a longer chain of thunks: O(n) per commit.)
    @Test(arguments: Backend.allCases) func theObserverIsReachedThroughTheSameDepthAtEveryCommit(backend: Backend) async throws {
        try await backend.withStore { store throws in
            let depths = Shared<[Int]>([])
            let observation = store.observeCommits { _ in
                let depth = Thread.callStackReturnAddresses.count
                depths.withLock { $0.append(depth) }
            }
            defer { store.removeObserver(observation) }
            for index in 0..<2_000 { try seed(store, ["key\(index)": "value"]) }
            let recorded = depths.withLock { $0 }
            #expect(recorded.count == 2_000)
            #expect(recorded[9] == recorded[1_999], "call depth at commit 10: \(recorded[9]), at commit 2000: \(recorded[1_999])")
        }
    }
}

/// A change feed's buffer is bounded (ChangeFeed.F2): a consumer that falls behind gets every change
/// set it has room for, then `fellBehind` naming the last one, never a gap; commits never wait.
@Suite struct ChangeFeedBoundTests {
    @Test(arguments: Backend.allCases) func aConsumerThatFallsBehindGetsFellBehindAfterWhatItHas(backend: Backend) async throws {
        let store = try await backend.makeStore()
        defer { try? store.close() }
        let start = store.version
        let feed = try store.changes(bufferLimit: 8)
        for index in 0..<20 {
            try await store.write { unit in try unit.put(Array("k\(index)".utf8), [1]) }
        }
        var versions: [UInt64] = []
        await #expect(throws: ChangeFeedError.fellBehind(lastVersion: start + 8, bufferLimit: 8)) {
            for try await changeSet in feed { versions.append(changeSet.version) }
        }
        #expect(versions == Array((start + 1)...(start + 8)))
        // Resuming from the last version received misses nothing.
        var resumed: [UInt64] = []
        for try await changeSet in try store.changes(after: start + 8) {
            resumed.append(changeSet.version)
            if resumed.count == 12 { break }
        }
        #expect(resumed == Array((start + 9)...(start + 20)))
    }

    @Test(arguments: Backend.allCases) func aBufferLimitThatIsNotPositiveIsRefusedSayingWhy(backend: Backend) async throws {
        let store = try await backend.makeStore()
        defer { try? store.close() }
        #expect { _ = try store.changes(bufferLimit: 0) } throws: { error in
            guard case let UnitOfWorkError.invalidRequest(reason) = error else { return false }
            return reason.contains("bufferLimit must be positive")
        }
    }
}
