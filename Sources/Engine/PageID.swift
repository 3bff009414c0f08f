// Page numbers of the data file. Page n starts at byte n × page size; pages 0 and 1 are
// the two meta pages (FORMAT.md, "Page file").

/// The number of a page in the data file.
package struct PageID: RawRepresentable, Hashable, Comparable, Sendable, CustomStringConvertible {
    package let rawValue: UInt64

    package init(rawValue: UInt64) { self.rawValue = rawValue }

    init(_ rawValue: UInt64) { self.rawValue = rawValue }

    /// "No page" in on-disk pointers (page 0 is a meta page, never a child).
    static let none = PageID(0)
    /// The first page that is not a meta page.
    static let firstDataPage = PageID(2)

    package static func < (lhs: PageID, rhs: PageID) -> Bool { lhs.rawValue < rhs.rawValue }

    package var description: String { "page \(rawValue)" }

    /// The page's byte offset in a file of `pageBytes` pages (`Int64.max` for a page
    /// number from a corrupt page that no file can reach).
    func offset(pageBytes: Int) -> Int64 {
        guard rawValue <= Limits.maxPageCount else { return .max }
        return Int64(rawValue) * Int64(pageBytes)
    }
}

/// What a page holds (byte 4 of every page).
enum PageType: UInt8 {
    case meta = 1, branch = 2, leaf = 3, overflow = 4, freeList = 5
}

/// A set of page types (what a reader accepts at a page), a bit per type: testing it
/// allocates and hashes nothing.
struct PageTypes: OptionSet {
    let rawValue: UInt8

    static let branch = PageTypes(.branch)
    static let leaf = PageTypes(.leaf)
    static let overflow = PageTypes(.overflow)
    static let freeList = PageTypes(.freeList)
    static let tree: PageTypes = [.branch, .leaf]

    init(rawValue: UInt8) { self.rawValue = rawValue }
    init(_ type: PageType) { rawValue = 1 << type.rawValue }

    func contains(_ type: PageType) -> Bool { contains(PageTypes(type)) }

    /// The raw type values, for messages.
    var rawValues: [UInt8] { (0..<8).filter { rawValue & (1 << $0) != 0 } }
}
