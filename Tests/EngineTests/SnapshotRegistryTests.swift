import Foundation
import StrataLocks
import Synchronization
import StrataWAL
import Testing
@testable import StrataEngine

/// The per-CPU count of live snapshots (SnapshotRegistry.swift): what a checkpoint asks it
/// (the oldest tree and version read) and what it lets go of.
@Suite struct SnapshotRegistryTests {
    /// A snapshot counted by `registry`: its view (borrowed: SnapshotRegistry.R3) and stripe.
    private struct Pin {
        let view: Unmanaged<EngineState>
        let stripe: Int
        var state: EngineState { view.takeUnretainedValue() }
    }

    private func pin(_ registry: SnapshotRegistry) -> Pin {
        let (view, stripe) = registry.pin()
        return Pin(view: view, stripe: stripe)
    }

    private func unpin(_ pin: Pin, _ registry: SnapshotRegistry) {
        registry.unpin(pin.view, stripe: pin.stripe)
    }

    private func view(generation: UInt64, version: UInt64) -> EngineState {
        EngineState(version: version, tree: BTree(root: .none, height: 0), treeGeneration: generation, treeVersion: 0, frozen: nil,
                    active: Memtable())
    }

    /// Snapshots of a view keep counting under its generation and version after newer
    /// views are published, until each ends; an old view nothing holds is let go of.
    @Test func snapshotsOfOlderViewsCountUntilTheyEnd() {
        let registry = SnapshotRegistry(view(generation: 1, version: 1), stripes: 4)
        #expect(registry.oldestPins() == (nil, nil))
        let first = pin(registry)
        let second = pin(registry)
        #expect(first.state.treeGeneration == 1 && second.state === first.state)
        #expect(registry.oldestPins() == (1, 1))

        registry.publish { $0.with(version: 5) }
        let third = pin(registry)
        #expect(third.state.version == 5)
        registry.publish { _ in self.view(generation: 2, version: 9) }
        let fourth = pin(registry)
        #expect(fourth.state.treeGeneration == 2)
        #expect(registry.oldestPins() == (1, 1))

        unpin(first, registry)
        #expect(registry.oldestPins() == (1, 1))
        unpin(second, registry)
        #expect(registry.oldestPins() == (1, 5))
        unpin(third, registry)
        #expect(registry.oldestPins() == (2, 9))
        unpin(fourth, registry)
        #expect(registry.oldestPins() == (nil, nil))
        #expect(registry.current.treeGeneration == 2)
    }

    /// A view that no snapshot holds and that no stripe will hand out again is let go of
    /// (its memtables with it): when its last snapshot ends after a newer publication, or,
    /// for one whose snapshots all ended before, when the checkpoint asks.
    @Test func aViewNothingHoldsIsLetGo() {
        let registry = SnapshotRegistry(view(generation: 1, version: 1), stripes: 2)
        weak var endedLast: EngineState?
        weak var endedFirst: EngineState?
        do {
            let snapshot = pin(registry)
            endedLast = snapshot.state
            registry.publish { _ in self.view(generation: 2, version: 2) }
            unpin(snapshot, registry)
        }
        #expect(endedLast == nil)
        do {
            let snapshot = pin(registry)
            endedFirst = snapshot.state
            unpin(snapshot, registry)
            registry.publish { _ in self.view(generation: 3, version: 3) }
        }
        #expect(endedFirst != nil, "kept by its stripe, to hand out again until a newer one is published")
        registry.releaseIdleViews()
        #expect(endedFirst == nil)

        // An idle, out-of-date view also goes when a snapshot of an older one ends in its
        // stripe (a read-only store's stripes, between its moves to newer trees).
        let registry1 = SnapshotRegistry(view(generation: 1, version: 1), stripes: 1)
        weak var idle: EngineState?
        do {
            let old = pin(registry1)
            registry1.publish { _ in self.view(generation: 2, version: 2) }
            let newer = pin(registry1)
            idle = newer.state
            unpin(newer, registry1)
            registry1.publish { _ in self.view(generation: 3, version: 3) }
            unpin(old, registry1)
        }
        #expect(idle == nil)
    }

    /// A snapshot borrows its view: the registry alone keeps it (SnapshotRegistry.R3), as the
    /// stripe's view and then among its older ones once a newer view is handed out, until
    /// the last snapshot of it ends, and lets it go then. Fails when a view is released
    /// while a snapshot of it lives (the weak reference goes early), or kept after.
    @Test func theRegistryKeepsEveryViewASnapshotReads() {
        let registry = SnapshotRegistry(view(generation: 1, version: 1), stripes: 1)
        weak var first: EngineState?
        weak var second: EngineState?
        var pins: [Pin] = []
        do {
            pins.append(pin(registry))
            pins.append(pin(registry))
            first = pins[0].state
            registry.publish { _ in self.view(generation: 2, version: 2) }
        }
        #expect(first != nil, "the stripe's view, pinned twice")
        do {
            pins.append(pin(registry))
            second = pins[2].state
            registry.publish { _ in self.view(generation: 3, version: 3) }
            pins.append(pin(registry))
        }
        #expect(first != nil && second != nil, "older views with live snapshots")
        #expect(registry.oldestPins() == (1, 1))
        unpin(pins[0], registry)
        #expect(first != nil, "one snapshot of it still lives")
        unpin(pins[1], registry)
        #expect(first == nil)
        #expect(registry.oldestPins() == (2, 2))
        unpin(pins[2], registry)
        #expect(second == nil)
        unpin(pins[3], registry)
        #expect(registry.oldestPins() == (nil, nil))
        #expect(registry.current.version == 3)
    }

    /// Publishing the current view again changes nothing: a stripe holding it keeps
    /// counting its snapshots once.
    @Test func publishingTheSameViewAgainIsNoPublication() {
        let registry = SnapshotRegistry(view(generation: 1, version: 1), stripes: 2)
        let snapshot = pin(registry)
        registry.publish { $0 }
        let again = pin(registry)
        unpin(snapshot, registry)
        unpin(again, registry)
        #expect(registry.oldestPins() == (nil, nil))
    }

    /// The checkpoint's question, asked while readers take and end snapshots on every CPU:
    /// a publisher publishes a newer tree, then counts the snapshots, and treats every
    /// tree older than the oldest it counted as reused. No snapshot may ever read a tree
    /// that was treated as reused (SnapshotRegistry.R2). Fails when a stripe hands out the
    /// view it kept without checking for a newer publication, or stops counting it.
    @Test func aCountAfterAPublicationMissesNoSnapshotOfAnOlderTree() {
        let registry = SnapshotRegistry(view(generation: 1, version: 1), stripes: 4)
        let reusedBelow = Atomic<UInt64>(0)
        let stop = Atomic(false)
        let violations = Atomic(0)
        let snapshotsTaken = Atomic(0)
        let readers = TestThreads(3) { _ in
            var held: [Pin] = []
            var step = 0
            while !stop.load(ordering: .relaxed) {
                let snapshot = pin(registry)
                held.append(snapshot)
                // Some snapshots live across several publications, and end in any order;
                // every fourth step none is left.
                step += 1
                while held.count > step % 4 {
                    let ending = held.remove(at: step % held.count)
                    if ending.state.treeGeneration < reusedBelow.load(ordering: .acquiring) {
                        violations.add(1, ordering: .relaxed)
                    }
                    unpin(ending, registry)
                }
                snapshotsTaken.add(1, ordering: .relaxed)
            }
            for snapshot in held {
                if snapshot.state.treeGeneration < reusedBelow.load(ordering: .acquiring) { violations.add(1, ordering: .relaxed) }
                unpin(snapshot, registry)
            }
        }
        var generation: UInt64 = 1
        for _ in 0..<5_000 {
            generation += 1
            let next = view(generation: generation, version: generation)
            registry.publish { _ in next }
            let oldest = min(registry.oldestPins().generation ?? generation, generation)
            reusedBelow.store(max(reusedBelow.load(ordering: .relaxed), oldest), ordering: .releasing)
        }
        stop.store(true, ordering: .relaxed)
        readers.wait()
        print("aCountAfterAPublicationMissesNoSnapshotOfAnOlderTree: \(snapshotsTaken.load(ordering: .relaxed)) snapshots, 5,000 trees")
        #expect(violations.load(ordering: .relaxed) == 0)
        #expect(snapshotsTaken.load(ordering: .relaxed) > 1_000)
        #expect(registry.oldestPins() == (nil, nil))
    }

    /// A snapshot may end on another thread (and CPU) than it began: it ends in its own
    /// stripe, and the engine's checkpoints then see no snapshot left.
    @Test func aSnapshotEndedOnAnotherThreadIsNoLongerCounted() throws {
        let engine = try StorageEngine.inMemory()
        defer { try? engine.close() }
        try engine.commit(WALBatch([.put(key: Array("k".utf8), value: [1])]))
        let handOff = Locked<[Snapshot]>((0..<64).map { _ in engine.snapshot() })
        #expect(engine.snapshots.oldestPins().version == engine.version)
        TestThreads(1) { _ in handOff.withLock { $0.removeAll() } }.wait()
        #expect(engine.snapshots.oldestPins() == (nil, nil))
    }
}
