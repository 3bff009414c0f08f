// Every size limit of the engine, in one place. Input over a limit is refused with an
// error that states the limit (`EngineError.keyTooLarge`, `.valueTooLarge`).

import StrataWAL

/// The engine's size limits.
public enum Limits {
    /// The longest key, in bytes. A leaf cell with a key this long and an overflow
    /// reference still leaves room for four cells in the smallest page. The log's format
    /// holds the same limit, so a batch read back obeys it (`WALFormat.maxKeyBytes`; a
    /// test checks they agree). This and `maxValueBytes` are computed, not stored: a
    /// stored constant taken from another module is read through a once-guard at every
    /// use, and every probe of a page's search checks a key length against this (the
    /// guard was about 5 % of a scan's samples at 1M keys).
    public static var maxKeyBytes: Int { 768 }
    /// The longest value, in bytes (large values live in overflow pages).
    public static var maxValueBytes: Int { 64 << 20 }
    /// The page sizes a data file may use: a power of two in this range.
    public static let pageBytesRange = 4096...65536
    /// The page size of new data files.
    public static let defaultPageBytes = 4096
    /// The most pages a data file may have (2^40 pages of 4 KiB is 4 PiB).
    public static let maxPageCount: UInt64 = 1 << 40

    /// The most bytes one cell of a leaf may take inline (so at least two fit, with their
    /// slots); values that would make a cell larger go to overflow pages. Half a page, not
    /// a quarter: a 1,000-byte value took a whole 4 KiB overflow page at a quarter.
    static func maxInlineCellBytes(pageBytes: Int) -> Int { PageCodec.hintedCapacity(pageBytes: pageBytes) / 2 - 2 }
}
