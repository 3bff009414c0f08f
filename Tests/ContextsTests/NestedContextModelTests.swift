// Model-based test of nested contexts: seeded random trees of contexts up to depth 8
// with puts, deletes, gets, scans, child commits under every merge policy, discards,
// refreshes, competing root commits, checkpoints and reopens, checked against plain
// dictionaries. Replay a failure with its printed seed.
import Strata
import StrataTesting
import Testing

@Suite struct NestedContextModelTests {
    /// The model of one open context.
    struct ModelContext {
        var context: Context
        var parent: Int?
        /// What the context sees.
        var view: [String: String]
        /// Its own staged writes (nil: a delete).
        var written: [String: String?] = [:]
        /// The write id behind each key of its overlay (own writes and merged ones).
        var stamps: [String: Int] = [:]
        /// The parent's `stamps` when this context was opened.
        var forkStamps: [String: Int] = [:]
        var snapshotVersion: UInt64 = 0
        var depth: Int
    }

    struct Run {
        let seed: UInt64
        var random: SplitMix64
        let fileSystem = SimulatedFileSystem()
        var store: Store
        /// The committed state, and the version that last wrote each key.
        var committed: [String: String] = [:]
        var lastWrite: [String: UInt64] = [:]
        var open: [Int: ModelContext] = [:]
        var nextID = 0
        var nextStamp = 0
        var counts: [String: Int] = [:]

        init(seed: UInt64) throws {
            self.seed = seed
            random = SplitMix64(seed: seed)
            store = try Store.open(path: "/db", fileSystem: fileSystem, options: Self.options)
        }

        static var options: EngineOptions {
            var options = EngineOptions()
            options.checkpointMemtableBytes = 16 << 10
            return options
        }

        mutating func pick(_ bound: Int) -> Int { Int(random.next() % UInt64(bound)) }
        mutating func key() -> String { "k" + String(pick(40)) }
        mutating func policy() -> MergePolicy { [MergePolicy.error, .childWins, .parentWins][pick(3)] }

        mutating func openRoot() {
            let policy = policy()
            let context = store.makeContext(mergePolicy: policy)
            open[nextID] = ModelContext(context: context, parent: nil, view: committed,
                                        snapshotVersion: context.version, depth: 0)
            nextID += 1
        }

        func children(of id: Int) -> [Int] { open.filter { $0.value.parent == id }.map(\.key).sorted() }

        /// Removes `id` and its descendants from the model.
        mutating func forget(_ id: Int) {
            for child in children(of: id) { forget(child) }
            open[id] = nil
        }

        mutating func step() throws {
            if open.isEmpty { openRoot() }
            let ids = open.keys.sorted()
            let id = ids[pick(ids.count)]
            let roll = pick(100)
            switch roll {
            case 0..<25: try write(id, delete: false)
            case 25..<33: try write(id, delete: true)
            case 33..<48: try read(id)
            case 48..<56: try scan(id)
            case 56..<68: try makeChild(id)
            case 68..<80: try commit(id)
            case 80..<85: discard(id)
            case 85..<90: try externalCommit()
            case 90..<93: try refresh(id)
            case 93..<95: try store.engine.checkpoint()
            case 95: try reopen()
            default: try read(id)
            }
        }

        mutating func write(_ id: Int, delete: Bool) throws {
            let key = key()
            let value: String? = delete ? nil : "v\(pick(1000))"
            if let value { try open[id]!.context.put(bytes(key), bytes(value)) } else { try open[id]!.context.delete(bytes(key)) }
            nextStamp += 1
            open[id]!.view[key] = value
            open[id]!.written[key] = .some(value)
            open[id]!.stamps[key] = nextStamp
            counts["write", default: 0] += 1
        }

        mutating func read(_ id: Int) throws {
            let key = key()
            let model = open[id]!
            let actual = text(try model.context.get(bytes(key)))
            #expect(actual == model.view[key], "seed \(seed): get \(key) at depth \(model.depth)")
        }

        mutating func scan(_ id: Int) throws {
            let model = open[id]!
            let prefix = pick(2) == 0 ? "" : "k" + String(pick(4))
            let reverse = pick(2) == 0
            let limit = pick(3) == 0 ? pick(10) : Int.max
            var expected = model.view.filter { $0.key.hasPrefix(prefix) }.map { ($0.key, $0.value) }
            expected.sort { reverse ? Array($0.0.utf8).lexicographicallyPrecedes(Array($1.0.utf8)) == false
                : Array($0.0.utf8).lexicographicallyPrecedes(Array($1.0.utf8)) }
            let actual = try model.context.scan(prefix: bytes(prefix), reverse: reverse, limit: limit)
            #expect(keys(actual) == expected.prefix(limit).map(\.0), "seed \(seed): scan \(prefix) reverse \(reverse)")
            #expect(actual.map { text($0.value)! } == expected.prefix(limit).map(\.1), "seed \(seed): scan values")
            counts["scan", default: 0] += 1
        }

        mutating func makeChild(_ id: Int) throws {
            guard open[id]!.depth < 7, open.count < 16 else { return try read(id) }
            let policy = policy()
            let parent = open[id]!
            let child = try parent.context.makeChild(mergePolicy: policy)
            open[nextID] = ModelContext(context: child, parent: id, view: parent.view, forkStamps: parent.stamps,
                                        snapshotVersion: parent.snapshotVersion, depth: parent.depth + 1)
            nextID += 1
            counts["child", default: 0] += 1
        }

        mutating func commit(_ id: Int) throws {
            let model = open[id]!
            guard children(of: id).isEmpty else {
                #expect(throws: ContextError.self, "seed \(seed)") { try model.context.commit() }
                return
            }
            guard let parentID = model.parent else { return try commitRoot(id) }
            let parent = open[parentID]!
            let conflicts = model.written.keys.filter { parent.stamps[$0] != model.forkStamps[$0] }.sorted()
            if !conflicts.isEmpty && model.context.mergePolicy == .error {
                do {
                    try model.context.commit()
                    Issue.record("seed \(seed): merge with conflicts \(conflicts) succeeded")
                } catch let ContextError.mergeConflict(keys) {
                    #expect(keys.map { String(decoding: $0, as: UTF8.self) }.sorted() == conflicts, "seed \(seed)")
                }
                counts["mergeConflict", default: 0] += 1
                return
            }
            try model.context.commit()
            for (key, value) in model.written {
                if model.context.mergePolicy == .parentWins && conflicts.contains(key) { continue }
                open[parentID]!.view[key] = value
                open[parentID]!.written[key] = .some(value)
                open[parentID]!.stamps[key] = model.stamps[key]
            }
            open[id] = nil
            counts["childCommit", default: 0] += 1
        }

        mutating func commitRoot(_ id: Int) throws {
            let model = open[id]!
            let conflicts = model.written.keys.filter { lastWrite[$0, default: 0] > model.snapshotVersion }.sorted()
            do {
                let receipt = try model.context.commit()
                #expect(conflicts.isEmpty, "seed \(seed): root commit ignored conflicts \(conflicts)")
                apply(model.written, version: receipt.version, empty: model.written.isEmpty)
                counts["rootCommit", default: 0] += 1
            } catch let ContextError.conflict(keys, _) {
                #expect(keys.map { String(decoding: $0, as: UTF8.self) } == conflicts, "seed \(seed)")
                model.context.discard()
                counts["rootConflict", default: 0] += 1
            }
            open[id] = nil
        }

        mutating func apply(_ written: [String: String?], version: UInt64, empty: Bool) {
            guard !empty else { return }
            for (key, value) in written {
                committed[key] = value
                lastWrite[key] = version
            }
        }

        /// Another writer commits a few keys (first committer wins against open roots).
        mutating func externalCommit() throws {
            var written: [String: String?] = [:]
            for _ in 0..<(1 + pick(3)) { written[key()] = .some(pick(4) == 0 ? nil : "x\(pick(1000))") }
            try store.write { unit in
                for (key, value) in written {
                    if let value { try unit.put(bytes(key), bytes(value)) } else { try unit.delete(bytes(key)) }
                }
            }
            apply(written, version: store.version, empty: false)
        }

        /// Discards a context: its open descendants end with it.
        mutating func discard(_ id: Int) {
            var descendants: [Context] = []
            var pending = children(of: id)
            while let next = pending.popLast() {
                descendants.append(open[next]!.context)
                pending += children(of: next)
            }
            open[id]!.context.discard()
            #expect(descendants.allSatisfy { $0.status == .discarded }, "seed \(seed): a child outlived its discarded parent")
            forget(id)
            counts["discard", default: 0] += 1
        }

        mutating func refresh(_ id: Int) throws {
            let model = open[id]!
            guard model.parent == nil, children(of: id).isEmpty else { return try read(id) }
            let conflicts = model.written.keys.filter { lastWrite[$0, default: 0] > model.snapshotVersion }
            if !conflicts.isEmpty && model.context.mergePolicy == .error {
                #expect(throws: ContextError.self, "seed \(seed)") { try model.context.refresh() }
                return
            }
            try model.context.refresh()
            var written = model.written
            if model.context.mergePolicy == .parentWins { for key in conflicts { written[key] = nil } }
            var view = committed
            for (key, value) in written { view[key] = value }
            open[id]!.written = written
            open[id]!.view = view
            open[id]!.snapshotVersion = model.context.version
            counts["refresh", default: 0] += 1
        }

        mutating func reopen() throws {
            for id in open.keys.sorted() { open[id]?.context.discard() }
            open.removeAll()
            try store.close()
            store = try Store.open(path: "/db", fileSystem: fileSystem, options: Self.options)
            #expect(Dictionary(uniqueKeysWithValues: try store.makeContext().scan().map {
                (String(decoding: $0.key, as: UTF8.self), text($0.value)!)
            }) == committed, "seed \(seed): reopened store differs")
            counts["reopen", default: 0] += 1
        }
    }

    @Test(arguments: [UInt64(1), 2, 3])
    func randomContextTreesMatchTheModel(seed: UInt64) throws {
        print("NestedContextModelTests seed \(seed)")
        var run = try Run(seed: seed)
        for _ in 0..<10_000 { try run.step() }
        print("seed \(seed): \(run.counts.sorted { $0.key < $1.key })")
        #expect(run.counts["mergeConflict", default: 0] > 0 && run.counts["rootConflict", default: 0] > 0)
        #expect(run.counts["childCommit", default: 0] > 100 && run.counts["reopen", default: 0] > 10)
    }
}
