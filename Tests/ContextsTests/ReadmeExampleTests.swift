// The "Using it" example of docs/Contexts.md, run on an in-memory store, so the guide shows
// code that compiles and does what it says.
import Strata
import Testing

@Suite struct ReadmeExampleTests {
    /// The synchronous part of the example (in async code the same calls take `await`).
    func synchronousPart(_ store: Store) throws -> (published: [UInt64], receipt: CommitReceipt) {
        var published: [UInt64] = []
        try store.write { unit in
            let hungriest = try unit.get(Array("child/ann".utf8))
            try unit.delete(Array("banana/big".utf8))
            try unit.put(Array("child/ann".utf8), Array("fed".utf8))
            unit.afterCommit { receipt in published.append(receipt.version) }
            try? unit.child { nested in
                try nested.put(Array("log/1".utf8), Array("maybe".utf8))
                throw CancellationError()
            }
            _ = hungriest
        }
        let context = store.makeContext()
        let form = try context.makeChild()
        try form.put(Array("draft".utf8), Array("text".utf8))
        form.discard()
        try context.put(Array("saved".utf8), Array("yes".utf8))
        let receipt = try context.commit()
        return (published, receipt)
    }

    @Test func readmeExampleRunsAsWritten() async throws {
        let store = try Store.inMemory()
        try seed(store, ["banana/big": "yellow", "child/ann": "hungry"])
        let (published, receipt) = try synchronousPart(store)
        #expect(published == [receipt.version - 1])

        try await store.write(retries: 3) { unit in try unit.put(Array("k".utf8), Array("v".utf8)) }

        let feed = try store.changes(after: receipt.version - 1)
        for try await change in feed {
            #expect(change.version == receipt.version)
            break
        }
        #expect(keys(try store.makeContext().scan()) == ["child/ann", "k", "saved"])
    }
}
