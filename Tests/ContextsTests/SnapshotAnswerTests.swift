// What a write's read of its key found in the snapshot, carried to the root's commit
// (Context.C6): set by the read, kept by its staged write and by a child's merge, dropped
// for an unchecked write, and forgotten by a refresh for keys another commit wrote since.
import Strata
import StrataContexts
import StrataTesting
import Testing

@Suite struct SnapshotAnswerTests {
    @Test func aReadsAnswerTravelsWithItsWriteUntilARefreshMakesItStale() throws {
        let (store, _) = try simulatedStore()
        defer { try? store.close() }
        try seed(store, ["held": "stored", "changed": "stored"])
        let root = store.makeContext(mergePolicy: .childWins)

        // A read that goes down to the snapshot learns whether it holds the key.
        #expect(try root.getNotingSnapshot(bytes("held")) == (bytes("stored"), true))
        #expect(try root.getNotingSnapshot(bytes("absent")) == (nil, false))

        // A staged write keeps the answer it is given; one staged without it knows nothing,
        // and an unchecked one keeps nothing (a refresh would not find its key written).
        try root.stage(bytes("absent"), bytes("new"), tracksInsert: true, snapshotHolds: false)
        try root.stage(bytes("changed"), bytes("mine"), tracksInsert: true, snapshotHolds: true)
        try root.put(bytes("plain"), bytes("put"))
        try root.stage(bytes("unchecked"), bytes("u"), isChecked: false, snapshotHolds: false)
        #expect(try root.getNotingSnapshot(bytes("absent")) == (bytes("new"), false))
        #expect(try root.getNotingSnapshot(bytes("plain")) == (bytes("put"), nil))
        #expect(try root.getNotingSnapshot(bytes("unchecked")) == (bytes("u"), nil))

        // A child reads its parent's entries with their answers, and its own merge into the
        // parent carries what it staged.
        let child = try root.makeChild()
        #expect(try child.getNotingSnapshot(bytes("absent")) == (bytes("new"), false))
        try child.stage(bytes("fromChild"), bytes("c"), tracksInsert: true, snapshotHolds: false)
        try child.commit()
        #expect(try root.getNotingSnapshot(bytes("fromChild")) == (bytes("c"), false))

        // Another commit writes "changed": the refresh keeps this context's write (childWins)
        // but forgets what its read found; keys nobody else wrote keep their answers.
        try seed(store, ["changed": "theirs"])
        try root.refresh()
        #expect(try root.getNotingSnapshot(bytes("changed")) == (bytes("mine"), nil))
        #expect(try root.getNotingSnapshot(bytes("absent")) == (bytes("new"), false))
        #expect(try root.getNotingSnapshot(bytes("fromChild")) == (bytes("c"), false))
        try root.commit()
        #expect(text(try store.makeContext().get(bytes("changed"))) == "mine")
    }
}
