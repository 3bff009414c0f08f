// The reader table: a small file beside the data file (`readers`; FORMAT.md, "Reader
// table"), mapped into memory by every process that has the store open, through which
// read-only openers in other processes read beside the one writer.
//
// Each read-only opener claims a slot by taking the lock on the slot's first byte, and
// keeps the lock while it is open: a slot whose lock another opener can take belongs to a
// process that died (or closed), whatever the slot still says. In its slot a reader
// publishes the oldest tree generation it may read (its pages must not be reused) and the
// first log LSN it may still read (its segments must not be released). The writer
// publishes, in the header, the newest version it has made durable: readers read the log
// only up to it, so they never read a frame that is being written.
//
// The protocol (as LMDB's reader table): a reader publishes the generation of the meta
// page it read, then reads the meta pages again; if a newer one appeared meanwhile it
// starts over. A checkpoint reads the slots after the meta page it follows was written,
// so a slot it missed belongs to a reader that is bound to see that meta page and retry.
//
// Invariants:
//  ReaderTable.T1. A live reader's pins are seen by every checkpoint that starts after the
//      reader's recheck of the meta pages succeeded.
//  ReaderTable.T2. The file's contents are never trusted for safety beyond the pins of
//      slots whose lock is held: a slot of a dead process is ignored and cleared.
// Thread-safety: `Sendable`; every word is read and written with atomic operations.
import Atomics
import Foundation
import StrataFileIO
import Synchronization

final class ReaderTable: Sendable {
    static let fileName = "readers"
    static let byteCount = 8192
    static let headerBytes = 64
    static let slotBytes = 64
    /// Slots in the table: as many readers may be open at once, in all processes.
    static let slotCount = (byteCount - headerBytes) / slotBytes
    /// "STRATARD" read as a little-endian word.
    static let magic = UInt64(littleEndian: "STRATARD".utf8.reversed().reduce(0) { $0 << 8 | UInt64($1) })
    static let formatVersion: UInt64 = 1
    /// Byte 0: held exclusively while the file is checked and initialized, and while a
    /// close moves pages; shared by a reader while it pins a tree and checks the meta pages.
    static let initLockByte = 0
    /// Byte 8: held exclusively by the writer while it has the store open.
    static let writerLockByte = 8
    /// No pin: a generation or LSN a slot does not hold back.
    static let none = UInt64.max

    // Header words (byte offsets).
    private enum Header {
        static let magic = 0, layout = 8, writerVersion = 16, writerGeneration = 24, writerProcess = 32
        static let pinnedPages = 40
    }

    // Slot words (byte offsets within a slot).
    private enum Slot {
        static let process = 0, generation = 8, logFrom = 16, version = 24
    }

    let file: any SharedFile
    let path: String
    /// The slot this opening claimed (-1 for none): its own lock would not stop it locking
    /// the byte again, so it is never taken for a dead reader's.
    private let ownSlot = Atomic(-1)

    private init(file: any SharedFile) {
        self.file = file
        path = file.path
    }

    deinit { file.close() }

    /// Opens (creating or repairing it) the reader table of the store in `directory`.
    /// Throws `FileIOError` when it cannot be opened for writing, and `EngineError`
    /// for a table a newer Strata laid out.
    static func open(directory: String, fileSystem: any FileSystem) throws -> ReaderTable {
        let file = try fileSystem.openShared(joinPath(directory, fileName), byteCount: byteCount)
        let table = ReaderTable(file: file)
        _ = try file.lockByte(initLockByte, exclusive: true, wait: true)
        defer { file.unlockByte(initLockByte) }
        let layout = formatVersion << 32 | UInt64(slotCount)
        let foundMagic = table.word(Header.magic).load(ordering: .sequentiallyConsistent)
        let foundLayout = table.word(Header.layout).load(ordering: .sequentiallyConsistent)
        if foundMagic == magic && foundLayout >> 32 > formatVersion {
            throw EngineError.unsupportedVersion(path: table.path, found: UInt16(truncatingIfNeeded: foundLayout >> 32),
                                                 supported: UInt16(formatVersion))
        }
        if foundMagic != magic || foundLayout != layout {
            // New, or not a table of this layout (damage, or a file left by something
            // else): no slot in it can be trusted, so it starts empty (ReaderTable.T2).
            file.base.initializeMemory(as: UInt8.self, repeating: 0, count: byteCount)
            for slot in 0..<slotCount {
                table.slotWord(slot, Slot.generation).store(none, ordering: .relaxed)
                table.slotWord(slot, Slot.logFrom).store(none, ordering: .relaxed)
            }
            table.word(Header.layout).store(layout, ordering: .sequentiallyConsistent)
            table.word(Header.magic).store(magic, ordering: .sequentiallyConsistent)
        }
        return table
    }

    private func word(_ offset: Int) -> UnsafeAtomic<UInt64> {
        UnsafeAtomic(at: (file.base + offset).assumingMemoryBound(to: UnsafeAtomic<UInt64>.Storage.self))
    }

    private func slotWord(_ slot: Int, _ offset: Int) -> UnsafeAtomic<UInt64> {
        word(Self.headerBytes + slot * Self.slotBytes + offset)
    }

    private static func lockByte(of slot: Int) -> Int { headerBytes + slot * slotBytes }

    // MARK: The writer's side

    /// Marks this opener as the store's writer (held until the table is closed), and
    /// publishes its first durable version.
    func attachWriter(version: UInt64, generation: UInt64) throws {
        publish(version: version, generation: generation)
        word(Header.writerProcess).store(UInt64(ProcessInfo.processInfo.processIdentifier), ordering: .sequentiallyConsistent)
        _ = try file.lockByte(Self.writerLockByte, exclusive: true, wait: true)
    }

    /// Runs `body` while no reader is between pinning a meta page's tree and reading the
    /// meta pages again: byte 0, shared by readers for that step, exclusive for a close
    /// that moves pages and cuts the file (a reader that pinned the old tree before is
    /// then in the table; one that pins after sees the new meta page).
    func excludingPinningReaders<T>(_ body: () throws -> T) throws -> T {
        _ = try file.lockByte(Self.initLockByte, exclusive: true, wait: true)
        defer { file.unlockByte(Self.initLockByte) }
        return try body()
    }

    /// Runs a reader's pin-and-recheck step (see `excludingPinningReaders`).
    func pinning<T>(_ body: () throws -> T) throws -> T {
        _ = try file.lockByte(Self.initLockByte, exclusive: false, wait: true)
        defer { file.unlockByte(Self.initLockByte) }
        return try body()
    }

    /// Gives up the writer's role (its close).
    func detachWriter() {
        file.unlockByte(Self.writerLockByte)
    }

    /// Publishes the newest durable version (and the tree generation of the newest meta page).
    func publish(version: UInt64? = nil, generation: UInt64? = nil) {
        if let generation { word(Header.writerGeneration).store(generation, ordering: .sequentiallyConsistent) }
        if let version { word(Header.writerVersion).store(version, ordering: .sequentiallyConsistent) }
    }

    /// Publishes how many freed pages wait for readers of older trees, for `strata stat`.
    func publishPinned(pages: UInt64) {
        word(Header.pinnedPages).store(pages, ordering: .relaxed)
    }

    /// The live readers, in slot order. Slots of dead readers are cleared on the way
    /// (ReaderTable.T2).
    func liveReaders() -> [ReaderEntry] {
        var live: [ReaderEntry] = []
        for slot in 0..<Self.slotCount {
            let process = slotWord(slot, Slot.process).load(ordering: .sequentiallyConsistent)
            guard process != 0 else { continue }
            // A lock this opener can take belongs to no live reader.
            if slot != ownSlot.load(ordering: .relaxed), (try? file.lockByte(Self.lockByte(of: slot), exclusive: true, wait: false)) == true {
                clear(slot)
                file.unlockByte(Self.lockByte(of: slot))
                continue
            }
            live.append(ReaderEntry(slot: slot, process: process,
                                    generation: slotWord(slot, Slot.generation).load(ordering: .sequentiallyConsistent),
                                    logFrom: slotWord(slot, Slot.logFrom).load(ordering: .sequentiallyConsistent),
                                    version: slotWord(slot, Slot.version).load(ordering: .sequentiallyConsistent)))
        }
        return live
    }

    private func clear(_ slot: Int) {
        slotWord(slot, Slot.generation).store(Self.none, ordering: .sequentiallyConsistent)
        slotWord(slot, Slot.logFrom).store(Self.none, ordering: .sequentiallyConsistent)
        slotWord(slot, Slot.version).store(0, ordering: .sequentiallyConsistent)
        slotWord(slot, Slot.process).store(0, ordering: .sequentiallyConsistent)
    }

    // MARK: The readers' side

    /// Whether a writer has the store open now. Never asked by the writer's own opening
    /// (its own lock would be converted, not tested).
    var writerIsLive: Bool {
        guard (try? file.lockByte(Self.writerLockByte, exclusive: false, wait: false)) == true else { return true }
        file.unlockByte(Self.writerLockByte)
        return false
    }

    /// What the writer published: its newest durable version, and its process.
    var writerVersion: UInt64 { word(Header.writerVersion).load(ordering: .sequentiallyConsistent) }
    var writerProcess: UInt64 { word(Header.writerProcess).load(ordering: .sequentiallyConsistent) }
    var writerGeneration: UInt64 { word(Header.writerGeneration).load(ordering: .sequentiallyConsistent) }
    var pinnedPages: UInt64 { word(Header.pinnedPages).load(ordering: .relaxed) }

    /// Claims a free slot for a reader of this process, pinning nothing yet (one per
    /// opening of the table). Throws
    /// `EngineError.tooManyReaders` when every slot is held.
    func claimSlot() throws -> ReaderSlot {
        for slot in 0..<Self.slotCount {
            guard ownSlot.load(ordering: .relaxed) < 0,
                  (try? file.lockByte(Self.lockByte(of: slot), exclusive: true, wait: false)) == true else { continue }
            ownSlot.store(slot, ordering: .relaxed)
            slotWord(slot, Slot.generation).store(Self.none, ordering: .sequentiallyConsistent)
            slotWord(slot, Slot.logFrom).store(Self.none, ordering: .sequentiallyConsistent)
            slotWord(slot, Slot.version).store(0, ordering: .sequentiallyConsistent)
            slotWord(slot, Slot.process).store(UInt64(ProcessInfo.processInfo.processIdentifier), ordering: .sequentiallyConsistent)
            return ReaderSlot(table: self, slot: slot)
        }
        throw EngineError.tooManyReaders(path: path, limit: Self.slotCount)
    }

    fileprivate func set(_ slot: Int, generation: UInt64? = nil, logFrom: UInt64? = nil, version: UInt64? = nil) {
        if let generation { slotWord(slot, Slot.generation).store(generation, ordering: .sequentiallyConsistent) }
        if let logFrom { slotWord(slot, Slot.logFrom).store(logFrom, ordering: .sequentiallyConsistent) }
        if let version { slotWord(slot, Slot.version).store(version, ordering: .sequentiallyConsistent) }
    }

    fileprivate func release(_ slot: Int) {
        clear(slot)
        file.unlockByte(Self.lockByte(of: slot))
        ownSlot.store(-1, ordering: .relaxed)
    }
}

/// One live reader, as its slot says.
struct ReaderEntry: Sendable, Equatable {
    var slot: Int
    /// Its process ID (as it wrote it; liveness is its lock's, not this number's).
    var process: UInt64
    /// The oldest tree generation it may read (`ReaderTable.none` when it pins none).
    var generation: UInt64
    /// The first log LSN it may still read (`ReaderTable.none` while it reads no log).
    var logFrom: UInt64
    /// The version it reads at.
    var version: UInt64
}

/// A read-only opener's slot, released by `release()` or when the opener goes away.
final class ReaderSlot: Sendable {
    let table: ReaderTable
    let slot: Int
    /// Set once the slot is given up: from then on it may be another reader's, so this
    /// one neither pins nor clears it (pins and the release are serialized by it).
    private let released = Mutex(false)

    fileprivate init(table: ReaderTable, slot: Int) {
        self.table = table
        self.slot = slot
    }

    deinit { release() }

    /// Pins `generation`'s pages and the log from `logFrom` (either may be `ReaderTable.none`).
    func pin(generation: UInt64? = nil, logFrom: UInt64? = nil, version: UInt64? = nil) {
        released.withLock { released in
            guard !released else { return }
            table.set(slot, generation: generation, logFrom: logFrom, version: version)
        }
    }

    /// Clears the slot and gives it up (once: the slot may be someone else's after).
    func release() {
        released.withLock { released in
            guard !released else { return }
            released = true
            table.release(slot)
        }
    }
}
