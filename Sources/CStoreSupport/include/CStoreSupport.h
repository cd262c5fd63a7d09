#ifndef STORECTL_CSTORESUPPORT_H
#define STORECTL_CSTORESUPPORT_H

/// rename(2) that fails with EEXIST instead of replacing `to`.
/// Linux renameat2(RENAME_NOREPLACE); glibc declares it only under _GNU_SOURCE.
int storectl_rename_noreplace(const char *from, const char *to);

#endif
