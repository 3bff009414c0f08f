import Strata
import StrataTesting
import TestBackends
import Testing

@Suite struct ContextTests {
    @Test(arguments: Backend.allCases) func readsSeeOwnOverlayThenParentThenSnapshot(backend: Backend) async throws {
        try await backend.withStore { store throws in
            try seed(store, ["a": "stored", "b": "stored", "c": "stored"])
            let root = store.makeContext()
            try root.put(bytes("b"), bytes("root"))
            let child = try root.makeChild()
            try child.put(bytes("c"), bytes("child"))
            try child.delete(bytes("a"))
            #expect(text(try child.get(bytes("a"))) == nil)
            #expect(text(try child.get(bytes("b"))) == "root")
            #expect(text(try child.get(bytes("c"))) == "child")
            #expect(text(try root.get(bytes("a"))) == "stored")
            #expect(text(try root.get(bytes("c"))) == "stored")
            #expect(keys(try child.scan()) == ["b", "c"])
            #expect(try child.scan().map { text($0.value) } == ["root", "child"])
        }
    }

    @Test(arguments: Backend.allCases) func childSeesParentAsOfForkButNotLaterParentWrites(backend: Backend) async throws {
        try await backend.withStore { store throws in
            let root = store.makeContext()
            try root.put(bytes("k"), bytes("before"))
            let child = try root.makeChild()
            try root.put(bytes("k"), bytes("after"))
            try root.put(bytes("new"), bytes("after"))
            #expect(text(try child.get(bytes("k"))) == "before")
            #expect(try child.get(bytes("new")) == nil)
            #expect(keys(try child.scan()) == ["k"])
        }
    }

    @Test(arguments: Backend.allCases) func makeChildSharesTheParentsOverlayInsteadOfCopyingIt(backend: Backend) async throws {
        try await backend.withStore { store throws in
            let root = store.makeContext()
            for index in 0..<10_000 { try root.put(bytes("key\(index)"), bytes("v")) }
            let first = try root.makeChild()
            let second = try root.makeChild()
            // O(1) fork: both children read the parent's overlay as it was, without a copy of it.
            #expect(first.changeCount == 0 && second.changeCount == 0)
            #expect(text(try second.get(bytes("key9999"))) == "v")
            #expect(root.openChildCount == 2)
        }
    }

    @Test func childCommitMergesIntoParentWithoutAnyIO() throws {
        let (store, fileSystem) = try simulatedStore()
        let root = store.makeContext()
        let child = try root.makeChild()
        let grandchild = try child.makeChild()
        try grandchild.put(bytes("x"), bytes("1"))
        try child.put(bytes("y"), bytes("2"))
        let before = fileSystem.operationCount
        try grandchild.commit()
        try child.commit()
        #expect(fileSystem.operationCount == before)
        #expect(text(try root.get(bytes("x"))) == "1")
        #expect(text(try root.get(bytes("y"))) == "2")
        #expect(try store.engine.snapshot().get(bytes("x")) == nil)
    }

    @Test func rootCommitIssuesExactlyOneFdatasync() throws {
        let (store, fileSystem) = try simulatedStore()
        let root = store.makeContext()
        let child = try root.makeChild()
        for index in 0..<100 { try child.put(bytes("k\(index)"), bytes("v\(index)")) }
        try child.commit()
        let syncs = fileSystem.count(of: .syncData) + fileSystem.count(of: .sync)
        let receipt = try root.commit()
        #expect(fileSystem.count(of: .syncData) + fileSystem.count(of: .sync) == syncs + 1)
        #expect(receipt.version == store.version && receipt.changeCount == 100 && receipt.groupSize == 1)
        #expect(receipt.rawByteCount > 0 && receipt.storedByteCount > 0)
        #expect(text(try store.engine.snapshot().get(bytes("k42"))) == "v42")
    }

    @Test func emptyRootCommitWritesNothing() throws {
        let (store, fileSystem) = try simulatedStore()
        let before = fileSystem.operationCount
        let receipt = try store.makeContext().commit()
        #expect(fileSystem.operationCount == before && receipt.changeCount == 0 && receipt.version == store.version)
    }

    @Test(arguments: Backend.allCases, [MergePolicy.error, .childWins, .parentWins])
    func siblingConflictIsSettledByTheMergePolicy(backend: Backend, policy: MergePolicy) async throws {
        try await backend.withStore { store throws in
            let root = store.makeContext()
            try root.put(bytes("shared"), bytes("root"))
            let first = try root.makeChild(mergePolicy: policy)
            let second = try root.makeChild(mergePolicy: policy)
            try first.put(bytes("shared"), bytes("first"))
            try first.put(bytes("onlyFirst"), bytes("1"))
            try second.put(bytes("shared"), bytes("second"))
            try second.put(bytes("onlySecond"), bytes("2"))
            try first.commit()
            switch policy {
            case .error:
                #expect {
                    try second.commit()
                } throws: { error in
                    guard case let ContextError.mergeConflict(keys) = error else { return false }
                    return keys == [bytes("shared")]
                }
                #expect(second.status == .open)
                #expect(text(try root.get(bytes("shared"))) == "first")
                #expect(try root.get(bytes("onlySecond")) == nil)
                second.discard()
            case .childWins:
                try second.commit()
                #expect(text(try root.get(bytes("shared"))) == "second")
            case .parentWins:
                try second.commit()
                #expect(text(try root.get(bytes("shared"))) == "first")
            }
            if policy != .error { #expect(text(try root.get(bytes("onlySecond"))) == "2") }
            #expect(text(try root.get(bytes("onlyFirst"))) == "1")
            try root.commit()
        }
    }

    @Test(arguments: Backend.allCases) func parentWriteAfterForkConflictsWithChildWriteOfTheSameKey(backend: Backend) async throws {
        try await backend.withStore { store throws in
            let root = store.makeContext()
            let child = try root.makeChild()
            try child.delete(bytes("k"))
            try root.put(bytes("k"), bytes("parent"))
            #expect(throws: ContextError.self) { try child.commit() }
            // A key the parent changed but the child did not write is no conflict.
            let other = try root.makeChild()
            try root.put(bytes("elsewhere"), bytes("p"))
            try other.put(bytes("mine"), bytes("c"))
            try other.commit()
            child.discard()
            #expect(text(try root.get(bytes("mine"))) == "c")
        }
    }

    @Test(arguments: Backend.allCases) func discardedChildLeavesNoTrace(backend: Backend) async throws {
        try await backend.withStore { store throws in
            let root = store.makeContext()
            let child = try root.makeChild()
            try child.put(bytes("draft"), bytes("x"))
            child.discard()
            #expect(try root.get(bytes("draft")) == nil)
            #expect(!root.hasChanges && root.openChildCount == 0)
            #expect(child.status == .discarded)
        }
    }

    @Test(arguments: Backend.allCases) func droppedChildCountsAsDiscarded(backend: Backend) async throws {
        try await backend.withStore { store throws in
            let root = store.makeContext()
            do {
                let form = try root.makeChild()
                try form.put(bytes("draft"), bytes("x"))
            }
            #expect(root.openChildCount == 0)
            try root.commit()
            #expect(try store.engine.snapshot().get(bytes("draft")) == nil)
        }
    }

    @Test(arguments: Backend.allCases) func finishedContextRefusesUseWithAClearError(backend: Backend) async throws {
        try await backend.withStore { store throws in
            let root = store.makeContext()
            let child = try root.makeChild()
            try child.commit()
            #expect(throws: ContextError.self) { try child.put(bytes("k"), bytes("v")) }
            #expect(throws: ContextError.self) { try child.get(bytes("k")) }
            #expect(throws: ContextError.self) { try child.commit() }
            #expect(throws: ContextError.self) { try child.makeChild() }
            try root.commit()
            do {
                try root.put(bytes("k"), bytes("v"))
                Issue.record("a committed context accepted a write")
            } catch let error as ContextError {
                #expect(error.description.contains("already committed"))
            }
        }
    }

    @Test(arguments: Backend.allCases) func parentWithOpenChildCannotCommitAndDiscardEndsItsChildren(backend: Backend) async throws {
        try await backend.withStore { store throws in
            let root = store.makeContext()
            let child = try root.makeChild()
            let grandchild = try child.makeChild()
            #expect {
                try root.commit()
            } throws: { error in
                guard case ContextError.childrenOpen(count: 1) = error else { return false }
                return true
            }
            #expect(throws: ContextError.self) { try child.commit() }
            child.discard()
            #expect(grandchild.status == .discarded)
            try root.commit()
        }
    }

    @Test(arguments: Backend.allCases) func rootCommitConflictNamesTheKeys(backend: Backend) async throws {
        try await backend.withStore { store throws in
            let first = store.makeContext()
            let second = store.makeContext()
            try first.put(bytes("balance"), bytes("1"))
            try first.put(bytes("other"), bytes("1"))
            try second.put(bytes("balance"), bytes("2"))
            try first.commit()
            #expect {
                try second.commit()
            } throws: { error in
                guard case let ContextError.conflict(keys, _) = error else { return false }
                return keys == [bytes("balance")]
            }
            #expect(second.status == .open)
            #expect(text(try store.engine.snapshot().get(bytes("balance"))) == "1")
        }
    }

    @Test(arguments: Backend.allCases) func rootSeesItsSnapshotNotLaterCommits(backend: Backend) async throws {
        try await backend.withStore { store throws in
            let reader = store.makeContext()
            try seed(store, ["k": "later"])
            #expect(try reader.get(bytes("k")) == nil)
            #expect(text(try store.makeContext().get(bytes("k"))) == "later")
        }
    }

    @Test(arguments: Backend.allCases, [MergePolicy.error, .childWins, .parentWins])
    func refreshRebasesTheOverlayUnderTheMergePolicy(backend: Backend, policy: MergePolicy) async throws {
        try await backend.withStore { store throws in
            let context = store.makeContext(mergePolicy: policy)
            try context.put(bytes("mine"), bytes("context"))
            try context.put(bytes("both"), bytes("context"))
            try seed(store, ["both": "store", "theirs": "store"])
            if policy == .error {
                #expect(throws: ContextError.self) { try context.refresh() }
                #expect(try context.get(bytes("theirs")) == nil)
                return
            }
            try context.refresh()
            #expect(context.version == store.version)
            #expect(text(try context.get(bytes("theirs"))) == "store")
            #expect(text(try context.get(bytes("mine"))) == "context")
            #expect(text(try context.get(bytes("both"))) == (policy == .childWins ? "context" : "store"))
            try context.commit()
            #expect(text(try store.engine.snapshot().get(bytes("both"))) == (policy == .childWins ? "context" : "store"))
        }
    }

    @Test(arguments: Backend.allCases) func refreshIsForRootsWithoutOpenChildren(backend: Backend) async throws {
        try await backend.withStore { store throws in
            let root = store.makeContext()
            let child = try root.makeChild()
            #expect(throws: ContextError.self) { try child.refresh() }
            #expect(throws: ContextError.self) { try root.refresh() }
        }
    }

    @Test(arguments: Backend.allCases) func scanMergesEveryLevelWithRangePrefixReverseAndLimit(backend: Backend) async throws {
        try await backend.withStore { store throws in
            try seed(store, ["a1": "s", "a2": "s", "a3": "s", "b1": "s"])
            let root = store.makeContext()
            try root.delete(bytes("a2"))
            try root.put(bytes("a4"), bytes("r"))
            let child = try root.makeChild()
            try child.put(bytes("a2"), bytes("c"))
            try child.delete(bytes("a3"))
            try child.put(bytes("a0"), bytes("c"))
            #expect(keys(try child.scan(prefix: bytes("a"))) == ["a0", "a1", "a2", "a4"])
            #expect(keys(try child.scan(prefix: bytes("a"), reverse: true)) == ["a4", "a2", "a1", "a0"])
            #expect(keys(try child.scan(from: bytes("a1"), to: bytes("a4"))) == ["a1", "a2"])
            #expect(keys(try child.scan(from: bytes("a1"), to: bytes("b2"), reverse: true, limit: 2)) == ["b1", "a4"])
            #expect(keys(try child.scan(limit: 0)).isEmpty)
            #expect(keys(try root.scan()) == ["a1", "a3", "a4", "b1"])
        }
    }

    @Test(arguments: Backend.allCases) func oversizedKeyIsRefusedWithTheLimit(backend: Backend) async throws {
        try await backend.withStore { store throws in
            let context = store.makeContext()
            #expect {
                try context.put([UInt8](repeating: 1, count: Limits.maxKeyBytes + 1), [])
            } throws: { error in
                "\(error)".contains("\(Limits.maxKeyBytes)")
            }
            #expect(throws: EngineError.self) { try context.put([], bytes("v")) }
            try context.put([UInt8](repeating: 1, count: Limits.maxKeyBytes), [])
        }
    }

    @Test(arguments: Backend.allCases) func keysReservedForRecordsAreRefusedWithAClearError(backend: Backend) async throws {
        try await backend.withStore { store throws in
            let context = store.makeContext()
            #expect(throws: ContextError.reservedKey) { try context.put([0xFE, 0x72, 0x01], [1]) }
            #expect(throws: ContextError.reservedKey) { try context.delete([0xFE]) }
            try context.put([0xFD, 0xFF], [1])
            #expect("\(ContextError.reservedKey)".contains("repository"))
        }
    }

    @Test(arguments: Backend.allCases) func readIsReadOnly(backend: Backend) async throws {
        try await backend.withStore { store throws in
            try seed(store, ["k": "v"])
            let value = try store.read { context in try context.get(bytes("k")) }
            #expect(text(value) == "v")
            #expect(throws: ContextError.self) { try store.read { try $0.put(bytes("k"), bytes("x")) } }
        }
    }
}
