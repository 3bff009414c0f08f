import Strata
import Foundation
import Testing

/// RecordDecoder.swift: values read in place (strings and integers of keyed and unkeyed
/// containers) still fail with the coding path of the value that did not fit, as the
/// decoder's own path does for everything else.
@Suite struct RecordDecoderPathTests {
    struct Book: Codable { var title: String; var year: Int }
    struct Shelf: Codable { var label: String; var books: [Book]; var counts: [Int] }

    struct BookWithTextYear: Codable { var title: String; var year: String }
    struct ShelfWithTextYears: Codable { var label: String; var books: [BookWithTextYear]; var counts: [Int] }
    struct BookWithTitleNumber: Codable { var title: Int; var year: Int }
    struct ShelfWithTitleNumbers: Codable { var label: String; var books: [BookWithTitleNumber]; var counts: [Int] }
    struct ShelfWithTextCounts: Codable { var label: String; var books: [Book]; var counts: [String] }
    struct BookWithPages: Codable { var title: String; var year: Int; var pages: Int }
    struct ShelfWithPages: Codable { var label: String; var books: [BookWithPages]; var counts: [Int] }
    struct ShelfWithSmallCounts: Codable { var label: String; var books: [Book]; var counts: [Int8] }
    struct ShelfWithByteCounts: Codable { var label: String; var books: [Book]; var counts: [UInt8] }

    let bytes: [UInt8]

    init() throws {
        let shelf = Shelf(label: "fiction", books: [Book(title: "Emma", year: 1815), Book(title: "Kim", year: 1901)],
                          counts: [3, 1_000])
        bytes = try RecordEncoder().encode(shelf)
    }

    /// The coding path of the error decoding `bytes` as `type` throws, as text.
    func failurePath<T: Decodable>(_ type: T.Type) throws -> String {
        do {
            _ = try RecordDecoder().decode(type, from: bytes)
        } catch let error as DecodingError {
            let context: DecodingError.Context
            switch error {
            case let .typeMismatch(_, found), let .valueNotFound(_, found), let .keyNotFound(_, found), let .dataCorrupted(found):
                context = found
            @unknown default:
                throw error
            }
            var path = context.codingPath.map { $0.intValue.map(String.init) ?? $0.stringValue }
            if case let .keyNotFound(key, _) = error { path.append(key.stringValue) }
            return path.joined(separator: ".")
        }
        Issue.record("\(type) decoded")
        return ""
    }

    @Test func theValuesThatDoNotFitAreNamedByTheirPath() throws {
        #expect(try RecordDecoder().decode(Shelf.self, from: bytes).books[1].year == 1901)
        #expect(try failurePath(ShelfWithTextYears.self) == "books.0.year")
        #expect(try failurePath(ShelfWithTitleNumbers.self) == "books.0.title")
        #expect(try failurePath(ShelfWithTextCounts.self) == "counts.0")
        #expect(try failurePath(ShelfWithPages.self) == "books.0.pages")
        // 1,000 does not fit an Int8: the second element.
        #expect(try failurePath(ShelfWithSmallCounts.self) == "counts.1")
        #expect(try failurePath(ShelfWithByteCounts.self) == "counts.1")   // read in place
    }
}
