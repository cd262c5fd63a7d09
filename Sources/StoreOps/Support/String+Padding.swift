import Foundation

extension String {
    public func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: " ", count: width - count) + self
    }

    /// Spaces after, to `width` characters as people see them (Foundation's `padding(toLength:)`
    /// counts UTF-16 units and cuts a longer text: a path with a combining accent lost a letter).
    public func rightPadded(to width: Int) -> String {
        count >= width ? self : self + String(repeating: " ", count: width - count)
    }
}
