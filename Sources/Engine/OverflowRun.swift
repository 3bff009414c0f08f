// Overflow runs (format 5, FORMAT.md "Overflow pages"): a value too large for its leaf,
// stored in consecutive pages that hold nothing but its bytes, so that a read hands out
// the value where it lies in the mapping instead of copying it out of a chain of pages.
//
// Why (measured 2026-11-29, build 4b55c52): a read copied a value of 64 KiB out of its
// 17-page chain into a new array, 81,037 reads a second against 2,040,816 for an engine
// that hands out a pointer into its map; and a value of 4 KiB took two pages, its chain's
// headers leaving 4,060 bytes a page.
//
// The leaf cell that names a run carries what a page header would: the bytes the run
// stores (the value, or its LZ4 block) and the CRC-32C of all its pages, so a run needs
// no header of its own, freeing it reads nothing, and a value of 4,096 bytes takes one
// page of 4 KiB. A misdirected or torn write into a run fails that checksum, as it would
// fail a page's.
import StrataCodec

/// Where a value too large for its leaf lies: the overflow pages from `first`, a run's
/// when `run` is set (format 5), else a chain's (formats 1 to 4).
struct LargeValue: Equatable, Sendable {
    var first: PageID
    /// The value's length.
    var byteCount: Int
    var run: Run?

    /// What a leaf cell says of a run.
    struct Run: Equatable, Sendable {
        /// Bytes of data at the run's start: the value (`byteCount` of them), or its LZ4
        /// block (fewer); zeros follow to the end of the run's last page.
        var stored: Int
        /// CRC-32C of the run's pages, every byte.
        var checksum: UInt32
    }

    /// A chain of format 4 and before.
    static func chain(first: PageID, byteCount: Int) -> LargeValue { LargeValue(first: first, byteCount: byteCount, run: nil) }

    /// Whether the run holds an LZ4 block rather than the value.
    var isCompressed: Bool { run.map { $0.stored < byteCount } ?? false }

    /// Pages the run takes (nil for a chain).
    func runPages(pageBytes: Int) -> Int? { run.map { PageCodec.runPages(storing: $0.stored, pageBytes: pageBytes) } }

    /// Bytes of a leaf cell's reference to it, after the flags byte.
    var referenceBytes: Int { run == nil ? 12 : 20 }
}

extension PageCodec {
    /// Leaf cell flags of a value in an overflow run (2 is a chain's).
    static let runFlag: UInt8 = 3

    /// Pages a run holding `stored` bytes takes.
    static func runPages(storing stored: Int, pageBytes: Int) -> Int { (stored + pageBytes - 1) / pageBytes }

    /// `data` (a value, or its LZ4 block) laid out as a run's pages, and their checksum.
    static func encodeRun(_ data: UnsafeRawBufferPointer, pageBytes: Int) -> (pages: [UInt8], checksum: UInt32) {
        let count = runPages(storing: data.count, pageBytes: pageBytes) * pageBytes
        let pages = [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            let raw = UnsafeMutableRawBufferPointer(buffer)
            if let source = data.baseAddress, !data.isEmpty { raw.baseAddress!.copyMemory(from: source, byteCount: data.count) }
            (raw.baseAddress! + data.count).initializeMemory(as: UInt8.self, repeating: 0, count: count - data.count)
            initialized = count
        }
        return (pages, pages.withUnsafeBytes { CRC32C.extend(0, $0) })
    }

    /// Decodes the overflow reference of a leaf cell with flags `flags` (a chain's or a
    /// run's) at `offset` of `bytes`; returns it and the offset past it.
    static func decodeLargeValue(_ flags: UInt8, _ bytes: UnsafeRawBufferPointer, at offset: Int,
                                 cell index: Int) throws(PageDefect) -> (LargeValue, end: Int) {
        let size = flags == runFlag ? 20 : 12
        guard offset + size <= bytes.count else { throw PageDefect("cell \(index) runs past the page") }
        func load(_ at: Int) -> UInt32 { UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: offset + at, as: UInt32.self)) }
        let value = try largeValue(flags, byteCount: load(0),
                                   first: UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: offset + 4, as: UInt64.self)),
                                   stored: flags == runFlag ? load(12) : 0, checksum: flags == runFlag ? load(16) : 0, cell: index)
        return (value, offset + size)
    }

    /// The overflow reference a leaf cell with flags `flags` declares, checked against the
    /// format's limits: a value no longer than the longest, a first page past the meta
    /// pages, and for a run at least one stored byte and no more than the value's.
    static func largeValue(_ flags: UInt8, byteCount: UInt32, first: UInt64, stored: UInt32, checksum: UInt32,
                           cell index: Int) throws(PageDefect) -> LargeValue {
        guard byteCount <= Limits.maxValueBytes, first >= PageID.firstDataPage.rawValue, first < Limits.maxPageCount else {
            throw PageDefect("cell \(index) has an overflow reference out of range")
        }
        guard flags == runFlag else { return .chain(first: PageID(first), byteCount: Int(byteCount)) }
        guard stored > 0, stored <= byteCount else {
            throw PageDefect("cell \(index) has a run of \(stored) bytes for a value of \(byteCount)")
        }
        return LargeValue(first: PageID(first), byteCount: Int(byteCount), run: LargeValue.Run(stored: Int(stored), checksum: checksum))
    }

    /// Checks a run's pages against the checksum its cell gives.
    static func verifyRun(_ pages: UnsafeRawBufferPointer, _ run: LargeValue.Run) throws(PageDefect) {
        guard CRC32C.extend(0, pages) == run.checksum else { throw PageDefect("its overflow run's checksum does not match") }
    }
}
