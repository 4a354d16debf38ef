// Entry point of the `prism` command line.
int main() { return 0; }
