/* VF_API marks what libvramfit.so exports: the functions of these headers, and nothing
 * else. The library is compiled with -fvisibility=hidden, so its internal functions, which
 * the rooms of src/ share among themselves, stay out of the shared library's symbol table
 * and can change without breaking a program linked against it. */
#ifndef VRAMFIT_API_H
#define VRAMFIT_API_H

#if defined(__GNUC__) || defined(__clang__)
#define VF_API __attribute__((visibility("default")))
#else
#define VF_API
#endif

#endif
