"""tiedemb's command line: python main.py {fit,validate,test,predict,initloss} --config ..."""

from tiedemb.cli import main

if __name__ == "__main__":
    main()
